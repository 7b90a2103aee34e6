"""A tool's JSON Schema in the subset one family's validator accepts (SPEC §11, `tool_schema`).

Each flavor below is a rewrite of the schema the client wrote into one its provider takes, and
never loses what the model reads of a property: its name, type, description and enum.

- `moonshot` (Moonshot's "moonshot flavored json schema"): the root is `type: object`; every
  schema names its `type`, or, beside `anyOf` / `oneOf`, leaves it to each member (the parent's
  `type` moves into the members that have none); a missing type is taken from the `enum` or
  `const` values, from `properties` (object) or `items` (array), else `string`; boolean schemas
  become typed ones; `required` lists only names that `properties` defines; local `$ref`s are
  inlined (Moonshot takes only `#/$defs/...`, and refuses a keyword beside a `$ref` that its
  target also has).
- `gemini` (Gemini's OpenAPI subset): none of the keywords `GEMINI_REFUSED`; `$ref`s inlined;
  `const` as a one-value `enum`; a list `type` as its first type, `nullable` when it held
  `null`; `items` on every array.
- `minimax`: the parameters are an object schema with `properties` (MiniMax refuses an empty
  parameter object).
- `openai`: a tool with `strict: true` whose schema strict mode would refuse (an object without
  `additionalProperties: false`, a property left out of `required`) is sent without `strict`;
  the schema itself is kept (`strict_compatible`).

Pure functions of the schema; a schema that needs nothing is returned as None (the caller keeps
the client's object, so a request that needs no repair still leaves byte for byte).
"""

from __future__ import annotations

from typing import Any

# Keywords Gemini's function declarations refuse ("Invalid JSON payload received. Unknown
# name ... Cannot find field.").
GEMINI_REFUSED = frozenset(
    {
        "$schema",
        "$id",
        "$ref",
        "$defs",
        "definitions",
        "$comment",
        "additionalProperties",
        "patternProperties",
        "propertyNames",
        "readOnly",
        "writeOnly",
        "uniqueItems",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "const",
        "examples",
        "default",
        "dependentRequired",
        "dependentSchemas",
        "unevaluatedProperties",
        "if",
        "then",
        "else",
    }
)

# Keywords whose value is one schema, a list of schemas, or a map of names to schemas.
_ONE = ("items", "additionalProperties", "not", "contains")
_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAPS = ("properties", "patternProperties")
_DEPTH = 48  # deeper than any real tool's schema; beyond it a schema is left as it is
_JSON_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
)

FLAVORS = frozenset({"moonshot", "gemini", "minimax"})


def flavored(schema: object, flavor: str) -> dict[str, Any] | None:
    """`schema` (a tool's parameters) in `flavor`, or None when it is already."""
    if flavor not in FLAVORS or not isinstance(schema, dict):
        return None
    if flavor == "minimax":
        return _minimax(schema)
    out = schema
    if _has_ref(schema, 0):
        out = _Inliner(schema).root()
    walk = _Moonshot() if flavor == "moonshot" else _Gemini()
    rewritten = walk.node(out, 0, root=True)
    return None if rewritten == schema else rewritten


# -- $ref ----------------------------------------------------------------------------------


def _has_ref(node: object, depth: int) -> bool:
    if depth > _DEPTH:
        return False
    if isinstance(node, dict):
        if "$ref" in node or "$defs" in node or "definitions" in node:
            return True
        return any(_has_ref(value, depth + 1) for value in node.values())
    if isinstance(node, list):
        return any(_has_ref(value, depth + 1) for value in node)
    return False


class _Inliner:
    """Local `$ref`s (`#/$defs/X`, `#/definitions/X`) replaced by their targets, the keywords
    beside a `$ref` winning over the target's; a reference to itself (a recursive type) or one
    that does not resolve becomes an untyped object schema that keeps its description."""

    def __init__(self, root: dict[str, Any]):
        self.root_schema = root
        self.expanding: list[str] = []

    def root(self) -> dict[str, Any]:
        out = self.value(self.root_schema, 0)
        assert isinstance(out, dict)
        out.pop("$defs", None)
        out.pop("definitions", None)
        return out

    def value(self, node: Any, depth: int) -> Any:
        if depth > _DEPTH:
            return node
        if isinstance(node, list):
            return [self.value(item, depth + 1) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str):
            return self.expand(ref, node, depth)
        return {
            key: self.value(value, depth + 1)
            for key, value in node.items()
            if key not in ("$defs", "definitions") or depth == 0
        }

    def expand(self, ref: str, node: dict[str, Any], depth: int) -> Any:
        siblings = {k: self.value(v, depth + 1) for k, v in node.items() if k != "$ref"}
        target = self.target(ref)
        if target is None or ref in self.expanding:
            return {"type": "object", **siblings}
        self.expanding.append(ref)
        try:
            inlined = self.value(target, depth + 1)
        finally:
            self.expanding.pop()
        if not isinstance(inlined, dict):
            return {"type": "object", **siblings}
        return {**inlined, **siblings}

    def target(self, ref: str) -> Any:
        for prefix in ("#/$defs/", "#/definitions/"):
            if ref.startswith(prefix):
                defs = self.root_schema.get(prefix[2:-1])
                name = ref[len(prefix) :]
                return defs.get(name) if isinstance(defs, dict) else None
        return None


# -- the walks -----------------------------------------------------------------------------


def _type_of(value: object) -> str:
    if value is None:
        return "null"
    for kind, name in _JSON_TYPES:
        if isinstance(value, kind):
            return name
    return "string"


def inferred_type(node: dict[str, Any]) -> str:
    """The type a schema without one holds: its enum's or const's values', else object for
    `properties`, array for `items`, else string."""
    values = node.get("enum")
    if not isinstance(values, list) or not values:
        values = [node["const"]] if "const" in node else []
    kinds = {_type_of(value) for value in values if value is not None}
    if kinds == {"integer", "number"}:
        return "number"
    if len(kinds) == 1:
        return kinds.pop()
    if "properties" in node:
        return "object"
    if "items" in node:
        return "array"
    return "string"


class _Walk:
    """A copy of a schema with each subschema rewritten (`fix`), children first."""

    def node(self, node: Any, depth: int, root: bool = False) -> Any:
        if depth > _DEPTH:
            return node
        if isinstance(node, bool):
            node = self.boolean(node)
        if not isinstance(node, dict):
            return node
        out = dict(node)
        for key in _ONE:
            if isinstance(out.get(key), dict | bool) and not (
                key == "additionalProperties" and isinstance(out[key], bool)
            ):
                out[key] = self.node(out[key], depth + 1)
        for key in _LISTS:
            if isinstance(out.get(key), list):
                out[key] = [self.node(item, depth + 1) for item in out[key]]
        for key in _MAPS:
            if isinstance(out.get(key), dict):
                out[key] = {name: self.node(s, depth + 1) for name, s in out[key].items()}
        return self.fix(out, root)

    def boolean(self, value: bool) -> Any:
        return value

    def fix(self, node: dict[str, Any], root: bool) -> dict[str, Any]:
        return node


class _Moonshot(_Walk):
    def boolean(self, value: bool) -> Any:
        return {}  # `true` (anything) as a typed schema below; `false` cannot be sent typed

    def fix(self, node: dict[str, Any], root: bool) -> dict[str, Any]:
        union = next((key for key in ("anyOf", "oneOf") if isinstance(node.get(key), list)), None)
        if root:
            if union is not None:
                _merge_alternatives(node, node.pop(union))
            node["type"] = "object"
        elif union is not None:
            parent = node.pop("type", None)
            node[union] = [_typed_member(member, parent) for member in node[union]]
        elif "type" not in node and "allOf" not in node:
            node["type"] = inferred_type(node)
        _known_required(node)
        return node


def _merge_alternatives(root: dict[str, Any], members: list[Any]) -> None:
    """A root `anyOf` / `oneOf` (alternative sets of required arguments, which Moonshot refuses
    beside the root's `type: object`): its members' properties join the root's, none lost."""
    properties = root.get("properties")
    merged = dict(properties) if isinstance(properties, dict) else {}
    for member in members:
        extra = member.get("properties") if isinstance(member, dict) else None
        for name, schema in extra.items() if isinstance(extra, dict) else ():
            merged.setdefault(name, schema)
    root["properties"] = merged


def _typed_member(member: Any, parent: object) -> Any:
    """An `anyOf` member with a type: the parent's, else its own inferred one (a member that
    is a union itself leaves the type to its own members)."""
    if not isinstance(member, dict) or "type" in member:
        return member
    if any(isinstance(member.get(key), list) for key in ("anyOf", "oneOf", "allOf")):
        return member
    if isinstance(parent, str) and parent:
        return {"type": parent, **member}
    return {"type": inferred_type(member), **member}


def _known_required(node: dict[str, Any]) -> None:
    """`required` as a list of the names `properties` defines (Moonshot: "required property
    ... is not defined in properties")."""
    required = node.get("required")
    if required is None:
        return
    properties = node.get("properties")
    names = properties if isinstance(properties, dict) else {}
    kept = (
        [name for name in required if isinstance(name, str) and name in names]
        if isinstance(required, list)
        else []
    )
    if kept != required:
        node["required"] = kept


class _Gemini(_Walk):
    def boolean(self, value: bool) -> Any:
        return {}

    def fix(self, node: dict[str, Any], root: bool) -> dict[str, Any]:
        if "const" in node and "enum" not in node:
            node["enum"] = [node["const"]]
        for key in GEMINI_REFUSED.intersection(node):
            del node[key]
        kind = node.get("type")
        if isinstance(kind, list):
            named = [k for k in kind if isinstance(k, str) and k != "null"]
            node["type"] = named[0] if named else "string"
            if "null" in kind:
                node["nullable"] = True
        if node.get("type") == "array" and not isinstance(node.get("items"), dict):
            node["items"] = {"type": "string"}
        if root and "type" not in node:
            node["type"] = "object"
        return node


def _minimax(schema: dict[str, Any]) -> dict[str, Any] | None:
    if schema.get("type") == "object" and isinstance(schema.get("properties"), dict):
        return None
    return {**schema, "type": "object", "properties": schema.get("properties") or {}}


# -- OpenAI strict mode --------------------------------------------------------------------


def strict_compatible(schema: object) -> bool:
    """Would OpenAI's strict mode take this schema? The root is an object, and every object
    closes its properties (`additionalProperties: false`) and requires each of them."""
    return isinstance(schema, dict) and schema.get("type") == "object" and _strict(schema, 0)


def _strict(node: object, depth: int) -> bool:
    if depth > _DEPTH or not isinstance(node, dict):
        return True
    if node.get("type") == "object" or "properties" in node:
        properties = node.get("properties")
        names = set(properties) if isinstance(properties, dict) else set()
        required = node.get("required")
        if node.get("additionalProperties") is not False:
            return False
        if not isinstance(required, list) or names - {str(name) for name in required}:
            return False
    return all(_strict(child, depth + 1) for child in _children(node))


def _children(node: dict[str, Any]) -> list[Any]:
    """The subschemas of a schema (`additionalProperties: false` is none)."""
    out: list[Any] = [node[key] for key in _ONE if isinstance(node.get(key), dict)]
    for key in _LISTS:
        if isinstance(node.get(key), list):
            out.extend(node[key])
    for key in (*_MAPS, "$defs", "definitions"):
        if isinstance(node.get(key), dict):
            out.extend(node[key].values())
    return out


def flavored_declaration(declaration: dict[str, Any], flavor: str) -> dict[str, Any]:
    """A tool declaration with `parameters` (a Chat `function`, a Responses `function` tool)
    as the family's flavor takes it: `strict` dropped where OpenAI's strict mode would refuse
    the schema, the schema in Moonshot's, Gemini's or MiniMax's subset; `declaration` itself
    where nothing changes."""
    if flavor == "openai":
        if declaration.get("strict") is True and not strict_compatible(
            declaration.get("parameters")
        ):
            return {key: value for key, value in declaration.items() if key != "strict"}
        return declaration
    if flavor not in FLAVORS:
        return declaration
    schema = flavored(declaration.get("parameters"), flavor)
    return declaration if schema is None else {**declaration, "parameters": schema}


__all__ = [
    "FLAVORS",
    "GEMINI_REFUSED",
    "flavored",
    "flavored_declaration",
    "inferred_type",
    "strict_compatible",
]
