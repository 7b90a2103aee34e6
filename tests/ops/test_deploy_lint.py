"""What CI cannot run, it lints and cross-checks: the Dockerfile with hadolint, every
Kubernetes manifest against the API schemas (kubernetes-validate, strict), and the compose
file by reading it. The cross-checks tie the files to each other and to the code: probe
paths, the port, the shutdown budget, the routes file, the secrets the routes name.

Each linter is also shown a broken file, so a linter that checks nothing fails here.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from proxy.cli.main import main
from proxy.config.load import DEFAULT_PORT, Route, load_yaml_routes
from proxy.server.draining import BACKSTOP_SECONDS
from tests.ops.helpers import REPO, dockerfile_instructions

BIN = Path(sys.executable).parent
DOCKERFILE = REPO / "Dockerfile"
K8S = REPO / "deploy" / "k8s"
COMPOSE = REPO / "deploy" / "docker-compose.yml"
MANIFESTS = sorted(K8S.glob("*.yaml"))
# The oldest Kubernetes the manifests promise to work on, and the schemas' newest.
K8S_VERSIONS = ("1.28.0", None)


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=120, check=False
    )


def documents() -> dict[str, dict[str, Any]]:
    """Every manifest by kind (one of each kind here)."""
    found: dict[str, dict[str, Any]] = {}
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            assert doc["kind"] not in found, f"two {doc['kind']} manifests"
            found[doc["kind"]] = doc
    return found


# -- Dockerfile ---------------------------------------------------------------------------------


def test_hadolint_passes_the_dockerfile() -> None:
    result = run(BIN / "hadolint", "--no-color", DOCKERFILE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_is_really_checking(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install flask\n", encoding="utf-8")
    result = run(BIN / "hadolint", "--no-color", bad)
    assert result.returncode != 0
    assert "DL3007" in result.stdout and "DL3013" in result.stdout


def test_dockerfile_is_multi_stage_slim_non_root_and_configured_by_environment() -> None:
    pairs = dockerfile_instructions()
    stages = [args for word, args in pairs if word == "FROM"]
    assert len(stages) >= 2, "build and runtime stages"
    base = next(args for word, args in pairs if word == "ARG" and args.startswith("PYTHON_IMAGE"))
    assert re.fullmatch(r"PYTHON_IMAGE=python:3\.11-slim(-\w+)?", base)
    final = pairs[max(i for i, (word, _) in enumerate(pairs) if word == "FROM") :]
    users = [args for word, args in final if word == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    envs = " ".join(args for word, args in final if word == "ENV")
    assert "TOOLCALL_PROXY_HOST=0.0.0.0" in envs
    assert f"TOOLCALL_PROXY_PORT={DEFAULT_PORT}" in envs
    assert ("EXPOSE", str(DEFAULT_PORT)) in final
    copies = " ".join(args for word, args in final if word == "COPY")
    assert "/src" not in copies, "the final stage gets the wheel, never the source tree"
    healthcheck = next(args for word, args in final if word == "HEALTHCHECK")
    assert "/healthz" in healthcheck and "urllib" in healthcheck
    assert "curl" not in healthcheck and "wget" not in healthcheck
    assert ("ENTRYPOINT", '["toolcall-proxy"]') in final


def test_dockerignore_keeps_only_what_the_build_copies() -> None:
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*", "an allow-list: everything is excluded first"
    allowed = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    copied = set()
    for word, args in dockerfile_instructions():
        if word == "COPY" and "--from" not in args:
            copied.update(shlex.split(args)[:-1])
    assert copied == allowed, (copied, allowed)
    for name in copied:
        assert (REPO / name).exists(), f"the build copies {name}, which does not exist"


# -- Kubernetes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_manifest_validates_strictly(version: str | None) -> None:
    assert {p.name for p in MANIFESTS} >= {
        "configmap.yaml",
        "deployment.yaml",
        "service.yaml",
        "hpa.yaml",
        "pdb.yaml",
    }
    args: list[str | Path] = [BIN / "kubernetes-validate", "--strict"]
    if version:
        args += ["-k", version]
    result = run(*args, *MANIFESTS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("passed") == len(MANIFESTS)


def test_kubernetes_validate_is_really_checking(tmp_path: Path) -> None:
    bad = tmp_path / "deployment.yaml"
    deployment = documents()["Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["livenesProbe"] = container.pop("livenessProbe")  # a typo in a field name
    bad.write_text(yaml.safe_dump(deployment), encoding="utf-8")
    result = run(BIN / "kubernetes-validate", "--strict", bad)
    assert result.returncode != 0
    assert "livenesProbe" in result.stdout + result.stderr


def _container(docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    containers = docs["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_deployment_probes_resources_and_shutdown_budget() -> None:
    docs = documents()
    spec = docs["Deployment"]["spec"]["template"]["spec"]
    container = _container(docs)
    port = next(p for p in container["ports"] if p["name"] == "http")
    assert port["containerPort"] == DEFAULT_PORT
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    for kind in ("requests", "limits"):
        assert set(container["resources"][kind]) == {"cpu", "memory"}
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True

    drain = float(_env(container)["TOOLCALL_PROXY_DRAIN_TIMEOUT"])
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    sleep = float(re.search(r"sleep\((\d+(?:\.\d+)?)\)", pre_stop[-1]).group(1))  # type: ignore[union-attr]
    assert spec["terminationGracePeriodSeconds"] > sleep + drain + BACKSTOP_SECONDS


def test_routes_configmap_passes_check_config_and_its_keys_come_from_secrets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = documents()
    routes_text = docs["ConfigMap"]["data"]["routes.yaml"]
    routes_file = tmp_path / "routes.yaml"
    routes_file.write_text(routes_text, encoding="utf-8")
    assert main(["check-config", str(routes_file)]) == 0, capsys.readouterr().err

    container = _container(docs)
    mount = next(m for m in container["volumeMounts"] if m["name"] == "routes")
    volume = next(v for v in docs["Deployment"]["spec"]["template"]["spec"]["volumes"])
    assert volume["configMap"]["name"] == docs["ConfigMap"]["metadata"]["name"]
    config_arg = container["args"][container["args"].index("--config") + 1]
    assert config_arg == f"{mount['mountPath']}/routes.yaml"

    env = _env(container)
    _, routes = load_yaml_routes(routes_text, Route(name="default", upstream=""))
    key_envs = {r.upstream_key_env for r in routes if r.upstream_key_env}
    assert key_envs, "the example routes use upstream keys"
    for name in [*key_envs, "TOOLCALL_PROXY_KEYS"]:
        assert "secretKeyRef" in env[name], f"{name} must come from a Secret"


def test_service_hpa_and_pdb_select_the_deployment() -> None:
    docs = documents()
    deployment = docs["Deployment"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= labels.items()
    assert docs["Service"]["spec"]["selector"].items() <= labels.items()
    service_port = docs["Service"]["spec"]["ports"][0]
    assert service_port["targetPort"] == "http"
    assert docs["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"] == selector
    target = docs["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    hpa = docs["HorizontalPodAutoscaler"]["spec"]
    pdb = docs["PodDisruptionBudget"]["spec"]
    assert hpa["minReplicas"] > pdb["minAvailable"], "a drain must never block on the budget"


# -- Compose ------------------------------------------------------------------------------------


def _compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _proxy_service(compose: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The service built from this repository's Dockerfile."""
    for name, service in compose["services"].items():
        build = service.get("build") or {}
        context = (COMPOSE.parent / build.get("context", ".")).resolve()
        if build and (context / build.get("dockerfile", "Dockerfile")).resolve() == DOCKERFILE:
            return name, service
    raise AssertionError("no service builds the repository's Dockerfile")


def test_sidecar_agent_points_at_the_proxy_service() -> None:
    compose = _compose()
    name, proxy = _proxy_service(compose)
    agents = [
        s for s in compose["services"].values() if "OPENAI_BASE_URL" in s.get("environment", {})
    ]
    assert agents, "an agent container with OPENAI_BASE_URL"
    for agent in agents:
        url = urlsplit(agent["environment"]["OPENAI_BASE_URL"])
        assert url.scheme == "http"
        assert url.hostname == name, "the agent must reach the proxy by its service name"
        port = int(proxy["environment"].get("TOOLCALL_PROXY_PORT", DEFAULT_PORT))
        assert url.port == port
        assert url.path == "/v1"
        assert agent["depends_on"][name]["condition"] == "service_healthy"


def test_compose_gateway_port_shutdown_and_routes_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, proxy = _proxy_service(_compose())
    published = [str(p) for p in proxy["ports"]]
    assert f"127.0.0.1:{DEFAULT_PORT}:{DEFAULT_PORT}" in published, "a loopback dev gateway"
    grace = proxy["stop_grace_period"]
    assert grace.endswith("s")
    assert float(grace[:-1]) > float(proxy["environment"]["TOOLCALL_PROXY_DRAIN_TIMEOUT"])
    for volume in proxy["volumes"]:
        source, target, *_ = volume.split(":")
        routes = (COMPOSE.parent / source).resolve()
        assert routes.is_file(), f"{source} is mounted but missing"
        assert main(["check-config", str(routes)]) == 0, capsys.readouterr().err
        assert target == "/etc/toolcall-proxy/routes.yaml"


def test_the_optional_streams_signal_is_a_valid_hpa_on_a_real_metric(tmp_path: Path) -> None:
    """hpa.yaml's commented-out Pods metric: uncommented, the HPA still validates, and the
    metric it scales on is one /metrics exports."""
    from proxy.ops.observability import Metrics

    lines = (K8S / "hpa.yaml").read_text(encoding="utf-8").splitlines()
    start = lines.index("    # - type: Pods")
    end = start
    while lines[end].startswith("    # "):
        end += 1
    block = ["    " + line[len("    # ") :] for line in lines[start:end]]
    enabled = tmp_path / "hpa.yaml"
    enabled.write_text("\n".join(lines[:start] + block + lines[end:]) + "\n")
    hpa = yaml.safe_load(enabled.read_text(encoding="utf-8"))
    names = [m.get("pods", {}).get("metric", {}).get("name") for m in hpa["spec"]["metrics"]]
    assert names == [None, "toolcall_proxy_active_streams"]
    assert b"\ntoolcall_proxy_active_streams " in Metrics().render()
    result = run(BIN / "kubernetes-validate", "--strict", enabled)
    assert result.returncode == 0, result.stdout + result.stderr
