"""deploy/grafana/toolcall-proxy.json shows the running proxy's own metrics.

The real proxy serves a little traffic on loopback (quirky providers, a replay loop, an
upstream error), then its /metrics is scraped. Every query of the dashboard (panels and
template variables) is parsed as PromQL, with Grafana's variables filled in; every metric it
selects must be exported and have samples, every label it filters or groups by must be one
the metric carries (or one Prometheus adds at scrape), and every metric the proxy exports
must appear on some panel. The dashboard's own structure is checked as Grafana imports it:
a Prometheus datasource variable every query uses, unique panel ids, grid positions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import promql_parser
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.config.load import Route, Settings
from proxy.server.app import create_app
from proxy.simulator import create_simulator_app
from tests.agent import run_agent
from tests.ops.helpers import REPO
from tests.servers import serving

DASHBOARD = REPO / "deploy" / "grafana" / "toolcall-proxy.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Grafana fills these in before a query reaches Prometheus.
VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "6h",
    "$job": ".*",
    "$route": ".*",
}
TARGET_LABELS = {"job", "instance"}  # added by Prometheus when it scrapes
_LABEL_VALUES = re.compile(r"label_values\((?P<selector>.+),\s*(?P<label>\w+)\)")


@dataclass(frozen=True)
class Selected:
    metric: str
    labels: frozenset[str]  # label names the query filters on or groups by around this metric


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def _queries(dashboard: dict[str, Any]) -> Iterator[str]:
    for panel in _panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            yield target["expr"]


def _fill(query: str) -> str:
    for name in sorted(VARIABLES, key=len, reverse=True):
        query = query.replace(name, VARIABLES[name])
    return query


def _selected(node: Any, grouping: frozenset[str] = frozenset()) -> Iterator[Selected]:
    """Every metric a parsed PromQL expression selects, with the labels used around it."""
    if isinstance(node, promql_parser.VectorSelector):
        matched = {matcher.name for matcher in node.matchers.matchers}
        yield Selected(str(node.name), grouping | matched)
    elif isinstance(node, promql_parser.MatrixSelector):
        yield from _selected(node.vector_selector, grouping)
    elif isinstance(node, promql_parser.AggregateExpr):
        labels = node.modifier.labels if node.modifier is not None else []
        yield from _selected(node.expr, grouping | frozenset(labels))
    elif isinstance(node, promql_parser.BinaryExpr):
        yield from _selected(node.lhs, grouping)
        yield from _selected(node.rhs, grouping)
    elif isinstance(node, promql_parser.Call):
        for arg in node.args:
            yield from _selected(arg, grouping)
    elif isinstance(node, promql_parser.ParenExpr):
        yield from _selected(node.expr, grouping)


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def exported() -> dict[str, set[str]]:
    """Sample name -> label names, from the running proxy's /metrics after some traffic."""
    with serving(create_simulator_app()) as simulator:
        route = Route(name="sim", upstream=simulator.url + "/v1")
        with serving(create_app(Settings(routes=(route,)))) as proxy:
            client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", max_retries=0)
            for model in ("kimi-k2", "repeat-fields", "replay-once"):
                run_agent(client, model, stream=True)
            with pytest.raises(openai.UnprocessableEntityError):  # the breaker trips
                run_agent(client, "replay-loop", stream=False)
            with pytest.raises(openai.InternalServerError):  # an upstream 500, passed on
                client.chat.completions.create(model="fault-500", messages=[])
            with pytest.raises(openai.APIError):  # a stream broken mid-way
                run_agent(client, "fault-reset", stream=True)
            text = httpx.get(proxy.url + "/metrics", timeout=10).text
    samples: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, set()).update(sample.labels)
    return samples


def test_every_query_selects_exported_metrics_and_their_labels(
    dashboard: dict[str, Any], exported: dict[str, set[str]]
) -> None:
    queries = list(_queries(dashboard))
    assert len(queries) >= 15
    for query in queries:
        selected = list(_selected(promql_parser.parse(_fill(query))))
        assert selected, query
        for item in selected:
            assert item.metric in exported, f"{item.metric} is not exported ({query})"
            allowed = exported[item.metric] | TARGET_LABELS
            assert item.labels <= allowed, f"{sorted(item.labels - allowed)} on {item.metric}"


def test_template_variables_query_exported_labels(
    dashboard: dict[str, Any], exported: dict[str, set[str]]
) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("job", "route"):
        match = _LABEL_VALUES.fullmatch(variables[name]["definition"])
        assert match is not None and variables[name]["query"]["query"] == match.group(0)
        [item] = _selected(promql_parser.parse(_fill(match.group("selector"))))
        assert match.group("label") in exported[item.metric] | TARGET_LABELS


def test_every_metric_the_proxy_exports_is_on_the_dashboard(
    dashboard: dict[str, Any], exported: dict[str, set[str]]
) -> None:
    on_dashboard = {
        item.metric.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")
        for query in _queries(dashboard)
        for item in _selected(promql_parser.parse(_fill(query)))
    }
    families = {
        re.sub(r"_(total|created|bucket|sum|count)$", "", name)
        for name in exported
        if name.startswith("toolcall_proxy_")
    }
    assert families <= {re.sub(r"_total$", "", name) for name in on_dashboard}


def test_it_imports_as_grafana_expects(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] == "toolcall-proxy" and dashboard["schemaVersion"] >= 36
    panels = list(_panels(dashboard["panels"]))
    assert len({panel["id"] for panel in panels}) == len(panels)
    for panel in panels:
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]), panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert len(set(refs)) == len(refs) and refs, panel["title"]
        assert all(target["datasource"] == DATASOURCE for target in panel["targets"])
