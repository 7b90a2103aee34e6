"""The label values the metrics export at 0 from start-up are exactly the ones the code emits.

proxy.core.note_labels lists every `reason` and `kind` a decision note can carry, and
proxy.ops.observability every upstream error kind; /metrics has a series at 0 for each from
start-up (tests/ops/test_metrics.py). These tests read the code that builds the notes, so a new
kind cannot be emitted without being listed (its series would show "No data" until it first
happened), and a listed value that nothing emits any more is caught as well.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import proxy
import proxy.core.errors
import proxy.core.ids
from proxy.core.note_labels import DROP_REASONS, REPAIR_KINDS, REWRITE_REASONS
from proxy.ops.observability import UPSTREAM_ERROR_KINDS

PACKAGE = Path(proxy.__file__).parent
# Each note class and its labelled field.
LABELLED = {"DeltaRepaired": "kind", "CallDropped": "reason", "IdRewritten": "reason"}


class Module:
    """One source file's syntax tree, with each node's parent."""

    def __init__(self, source: str, name: str) -> None:
        self.tree = ast.parse(source, name)
        self.parent: dict[ast.AST, ast.AST] = {
            child: node for node in ast.walk(self.tree) for child in ast.iter_child_nodes(node)
        }

    def function_of(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        while node in self.parent:
            node = self.parent[node]
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                return node
        return None

    def calls_to(self, name: str) -> Iterator[ast.Call]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and _called_name(node) == name:
                yield node


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


def _strings(module: Module, expr: ast.expr, at: ast.AST) -> set[str] | None:
    """The strings `expr` (an expression inside `at`'s function) can be, or None when that is
    not written in this module: a literal, either branch of a conditional, a local variable's
    assignments, or a parameter's argument at every call of its function here."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return {expr.value}
    if isinstance(expr, ast.IfExp):
        return _union(module, [(expr.body, at), (expr.orelse, at)])
    function = module.function_of(at)
    if not isinstance(expr, ast.Name) or function is None:
        return None
    params = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    if expr.id in params:
        return _arguments(module, function, params.index(expr.id), expr.id)
    assigned = [
        (node.value, at)
        for node in ast.walk(function)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == expr.id for t in node.targets)
    ]
    return _union(module, assigned)


def _arguments(
    module: Module, function: ast.FunctionDef | ast.AsyncFunctionDef, position: int, name: str
) -> set[str] | None:
    """What the parameter at `position` (`self` counted) gets at each call in this module."""
    method = position > 0 and function.args.args[0].arg == "self"
    index = position - 1 if method else position
    given: list[tuple[ast.expr, ast.AST]] = []
    for call in module.calls_to(function.name):
        keyword = [k.value for k in call.keywords if k.arg == name]
        given += [(value, call) for value in keyword or call.args[index : index + 1]]
    return _union(module, given)


def _union(module: Module, exprs: list[tuple[ast.expr, ast.AST]]) -> set[str] | None:
    """All the strings of these expressions (each with the node it is in); None if there are
    none or one of them cannot be read."""
    values = [_strings(module, expr, at) for expr, at in exprs]
    if not values or any(v is None for v in values):
        return None
    return set().union(*(v for v in values if v is not None))


@functools.cache
def _emitted() -> dict[str, tuple[set[str], list[str]]]:
    """Per note class: the label values its constructions in proxy/ can carry, and where one
    could not be read (`path:line`)."""
    found: dict[str, tuple[set[str], list[str]]] = {name: (set(), []) for name in LABELLED}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = Module(path.read_text(), str(path))
        for note, field in LABELLED.items():
            values, unread = found[note]
            for call in module.calls_to(note):
                given = [k.value for k in call.keywords if k.arg == field]
                strings = _strings(module, given[0], call) if given else None
                if strings is None:
                    unread.append(f"{path.relative_to(PACKAGE.parent)}:{call.lineno}")
                else:
                    values |= strings
    return found


def test_every_repair_kind_emitted_is_listed_and_every_listed_one_is_emitted() -> None:
    kinds, unread = _emitted()["DeltaRepaired"]
    assert unread == [], f"a DeltaRepaired kind that cannot be read from the code: {unread}"
    assert kinds == set(REPAIR_KINDS)
    assert len(REPAIR_KINDS) == len(kinds), "a kind listed twice"


def test_every_drop_reason_emitted_is_listed_and_every_listed_one_is_emitted() -> None:
    reasons, unread = _emitted()["CallDropped"]
    assert unread == [], f"a CallDropped reason that cannot be read from the code: {unread}"
    assert reasons == set(DROP_REASONS)


def test_every_rewrite_reason_is_listed() -> None:
    """IdRewritten's reason is a decision's, which comes from proxy.core.ids' REASON_* constants
    (read here as the module has them); any reason written as a literal is listed too."""
    literal, _ = _emitted()["IdRewritten"]
    constants = {
        value
        for name, value in vars(proxy.core.ids).items()
        if name.startswith("REASON_") and isinstance(value, str)
    }
    assert constants == set(REWRITE_REASONS)
    assert literal <= set(REWRITE_REASONS)


def test_no_other_module_defines_its_own_reasons() -> None:
    """A REASON_* constant defined outside proxy.core.ids would escape the test above."""
    defined = [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PACKAGE / "core" / "ids.py"  # (its __file__ is the compiled module's, in CI)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name) and target.id.startswith("REASON_")
    ]
    assert defined == []


def test_the_proxys_upstream_error_codes_are_listed() -> None:
    def family(
        cls: type[proxy.core.errors.ProxyError],
    ) -> Iterator[type[proxy.core.errors.ProxyError]]:
        yield cls
        for sub in cls.__subclasses__():
            yield from family(sub)

    codes = {cls.code for cls in family(proxy.core.errors.UpstreamError)}
    assert codes <= set(UPSTREAM_ERROR_KINDS)


EXAMPLE = """
class A:
    def go(self, flag):
        self._note("one")
        kind = "two" if flag else "three"
        DeltaRepaired(kind=kind)
        self._note(kind="four")

    def _note(self, kind):
        DeltaRepaired(kind=kind)
"""


def test_the_reader_follows_parameters_conditionals_and_local_variables() -> None:
    module = Module(EXAMPLE, "example.py")
    direct, through = module.calls_to("DeltaRepaired")
    assert _strings(module, direct.keywords[0].value, direct) == {"two", "three"}
    assert _strings(module, through.keywords[0].value, through) == {"one", "four"}


def test_the_reader_reports_a_value_it_cannot_read() -> None:
    """A kind that comes from elsewhere must be reported (and fail the tests above), not
    skipped."""
    module = Module(EXAMPLE.replace('self._note("one")', "self._note(other())"), "example.py")
    _, through = module.calls_to("DeltaRepaired")
    assert _strings(module, through.keywords[0].value, through) is None
