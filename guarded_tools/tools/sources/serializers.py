"""Provides DRF serializers as a tool's input and output: a JSON Schema, validation, errors.

The schema comes from drf-spectacular's serializer mapping (``AutoSchema.resolve_serializer``,
the method its serializer extensions call), read as OpenAPI 3.1, which is JSON Schema
2020-12: nullable fields are ``"type": [..., "null"]``; nested serializers are inlined
(a serializer cannot nest itself), so the schema means the same inside ``openapi.json``.
Each object is closed (``additionalProperties: false``), as a serializer ignores
unknown fields an agent would otherwise think were used. A field the
mapping cannot express (drf-spectacular falls back to ``string`` and warns) is recorded
as a problem: the system check ``guarded_tools.E011`` reports it, so no tool is served
with a silently looser schema.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from rest_framework import serializers
from rest_framework.settings import api_settings

from guarded_tools.tools.binding import InputRejected, field_title, inline_defs, issue

_REF = "#/components/schemas/"


def is_serializer(spec: Any) -> bool:
    return isinstance(spec, type) and issubclass(spec, serializers.BaseSerializer)


def binding_for(spec: Any, direction: str) -> SerializerBinding | None:
    """``spec``'s binding when it is a serializer class (a source of ``tools.binding``)."""
    return SerializerBinding(spec, direction=direction) if is_serializer(spec) else None


_DERIVING = threading.Lock()  # drf-spectacular's settings patch and stats are process-wide


@contextlib.contextmanager
def _reported(stats: Any, into: list[str]) -> Iterator[None]:
    """Every message drf-spectacular emits meanwhile, appended to ``into`` and passed on.

    ``stats.emit`` is shadowed on the instance for the block and the shadow removed after,
    so the class's method (and whatever counts it keeps) is what runs either way.
    """
    emit = stats.emit

    def listening(msg: str, severity: str) -> None:
        into.append(f"{severity.capitalize()}: {msg}")
        emit(msg, severity)

    stats.emit = listening
    try:
        yield
    finally:
        del stats.emit


def spectacular_components(
    serializer: type[serializers.BaseSerializer], direction: str
) -> tuple[str, dict[str, dict[str, Any]], list[str]]:
    """``(root name, {name: OpenAPI 3.1 schema}, warnings)`` for one serializer.

    The one place drf-spectacular is called. ``resolve_serializer`` and its
    ``ComponentRegistry`` are the API drf-spectacular's own serializer extensions use
    (documented under "Extensions"); it needs a view to build the serializer context,
    so an empty ``APIView`` stands in. Its warnings are what it hands to
    ``GENERATOR_STATS.emit`` (the method its ``warn`` and ``error`` report through, and
    which ``spectacular --fail-on-warn`` counts): :func:`_reported` listens there for the
    one derivation and passes every message on, so drf-spectacular's own counts are
    unchanged. The components are read with the registry's ``build`` and item lookup.
    ``tests/tools/test_serializers.py`` checks that an unmappable field is still reported, so
    a change there fails a test instead of loosening a schema.
    """
    try:
        from drf_spectacular.drainage import GENERATOR_STATS
    except ImportError:
        raise ImportError(
            "A tool whose input or output is a DRF serializer needs drf-spectacular for its"
            " schema: pip install 'guarded-tools[serializers]'."
        ) from None
    from drf_spectacular.openapi import AutoSchema
    from drf_spectacular.plumbing import ComponentRegistry, ResolvedComponent
    from drf_spectacular.settings import patched_settings
    from rest_framework.views import APIView

    view = APIView()
    view.request = None  # type: ignore[assignment]
    view.format_kwarg = None
    schema = AutoSchema()
    schema.registry = ComponentRegistry()
    schema.method = "POST" if direction == "request" else "GET"
    schema.path = "/"
    schema.view = view
    warnings: list[str] = []
    with _DERIVING, _reported(GENERATOR_STATS, warnings), \
            patched_settings({"OAS_VERSION": "3.1.0", "COMPONENT_SPLIT_REQUEST": True}), \
            GENERATOR_STATS.silence():
        root = schema.resolve_serializer(serializer, direction)  # type: ignore[arg-type]
    built = schema.registry.build({}).get(ResolvedComponent.SCHEMA, {})
    components = {
        name: _titled(value, schema.registry[(name, ResolvedComponent.SCHEMA)].object)
        for name, value in built.items() if value is not None
    }
    warnings = sorted(set(warnings))
    if root.name is None:  # drf-spectacular discards a serializer with no fields
        return "", {}, warnings
    return str(root.name), components, warnings


def _plain_names(
    root: str, components: dict[str, dict[str, Any]], direction: str
) -> tuple[str, dict[str, dict[str, Any]]]:
    """Components named after their serializers: without the ``Request`` suffix that
    ``COMPONENT_SPLIT_REQUEST`` adds (one schema has one direction, so nothing collides)."""
    if direction != "request":
        return root, components

    def plain(name: str) -> str:
        return name.removesuffix("Request") or name

    result = {plain(name): _rename_refs(schema, plain) for name, schema in components.items()}
    return plain(root), result


def _rename_refs(node: Any, plain: Callable[[str], str]) -> Any:
    if isinstance(node, list):
        return [_rename_refs(item, plain) for item in node]
    if not isinstance(node, dict):
        return node
    result = {key: _rename_refs(value, plain) for key, value in node.items()}
    ref = result.get("$ref")
    if isinstance(ref, str) and ref.startswith(_REF):
        result["$ref"] = _REF + plain(ref[len(_REF):])
    return result


def json_schema(
    serializer: type[serializers.BaseSerializer], direction: str
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The serializer's JSON Schema 2020-12 and the problems found while deriving it."""
    root, components, warnings = spectacular_components(serializer, direction)
    root, components = _plain_names(root, components, direction)
    problems = [_problem(w) for w in warnings]
    if not root:
        return {"type": "object", "properties": {}, "additionalProperties": False}, tuple(
            problems
        )
    schema = _clean(copy.deepcopy(components[root]))
    used = sorted(_refs(schema, components, root))
    if used:
        schema["$defs"] = {name: _clean(copy.deepcopy(components[name])) for name in used}
    schema = inline_defs(schema)
    if schema.get("type") == "array":  # many=True as the whole input: agents send objects
        problems.append("A list serializer cannot be a tool's input or output: tools take"
                        " and return a JSON object.")
    return schema, tuple(problems)


def _titled(schema: dict[str, Any], serializer: Any) -> dict[str, Any]:
    """Each field's ``label`` as its property's ``title`` (drf-spectacular leaves it out).

    A label DRF made up from the name (no ``label=`` given) is the name humanised as
    every derived title is (:func:`field_title`): ``operationId`` reads "Operation id".
    """
    fields = getattr(serializer, "fields", None)
    properties = schema.get("properties")
    if not isinstance(fields, Mapping) or not isinstance(properties, dict):
        return schema
    for name, field in fields.items():
        label = getattr(field, "label", None)
        if name in properties and label and isinstance(properties[name], dict):
            properties[name].setdefault("title", _label_title(name, str(label)))
    return schema


def _label_title(name: str, label: str) -> str:
    """``label``, unless it is DRF's default for ``name`` (``Field.bind``'s rule)."""
    return field_title(name) if label == name.replace("_", " ").capitalize() else label


def _problem(warning: str) -> str:
    """drf-spectacular's warning without its colour codes and source location."""
    text = warning.split("]: ", 1)[-1] if "]: " in warning else warning
    return " ".join(text.split())


def _refs(schema: Any, components: Mapping[str, Any], root: str) -> set[str]:
    """Every component name ``schema`` refers to, transitively (the root excluded)."""
    found: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                name = ref[len("#/$defs/"):]
                if name not in found and name in components:
                    found.add(name)
                    stack.append(_clean(copy.deepcopy(components[name])))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    found.discard(root)
    return found


def _clean(node: Any) -> Any:
    """OpenAPI 3.1 to plain JSON Schema: ``$defs`` refs, no ``x-`` keys, closed objects."""
    if isinstance(node, list):
        return [_clean(item) for item in node]
    if not isinstance(node, dict):
        return node
    result: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-"):
            continue
        if key == "$ref" and isinstance(value, str) and value.startswith(_REF):
            result[key] = "#/$defs/" + value[len(_REF):]
        elif key == "properties" and isinstance(value, dict):
            result[key] = {name: _clean(sub) for name, sub in value.items()}
        else:
            result[key] = _clean(value)
    wrapped = result.get("allOf")
    if isinstance(wrapped, list) and len(wrapped) == 1 and set(wrapped[0]) == {"$ref"}:
        # OpenAPI 3.0 ignored a $ref's siblings (a description), so drf-spectacular wraps
        # the $ref; JSON Schema 2020-12 applies them, and strict converters refuse allOf.
        del result["allOf"]
        result["$ref"] = wrapped[0]["$ref"]
    if result.get("type") == "object" and "properties" in result:
        result.setdefault("additionalProperties", False)
    return result


def issues_from_errors(errors: Any, known: frozenset[str]) -> list[dict[str, Any]]:
    """``serializer.errors`` as issues: JSON paths and codes, never DRF's texts (they quote
    the value sent, as in ``Invalid pk "7" - object does not exist.``)."""
    return list(_walk(errors, [], known))


def _walk(errors: Any, path: list[Any], known: frozenset[str]) -> Iterator[dict[str, Any]]:
    if isinstance(errors, Mapping):
        for name, sub in errors.items():
            if name == api_settings.NON_FIELD_ERRORS_KEY:
                yield from _walk(sub, path, known)
            else:
                yield from _walk(sub, [*path, name], known)
    elif isinstance(errors, list):
        if all(isinstance(e, (Mapping, list)) for e in errors) and errors:  # many=True
            for index, sub in enumerate(errors):
                yield from _walk(sub, [*path, index], known)
        else:
            for detail in errors:
                yield from _walk(detail, path, known)
    else:
        yield issue(path, getattr(errors, "code", "invalid"), known)


def context_for(ctx: Any) -> dict[str, Any]:
    """The serializer context a DRF view would give: the request (the agent's call)."""
    return {"request": getattr(ctx, "request", None), "tool_context": ctx}


class SerializerBinding:
    """A serializer class as a tool's input (``validated_data``) or output (``.data``)."""

    def __init__(self, serializer: type[serializers.BaseSerializer], *, direction: str) -> None:
        self.serializer = serializer
        self.schema, self.problems = json_schema(serializer, direction)

    def bind(self, input: Mapping[str, Any], ctx: Any, known: frozenset[str]) -> Any:
        instance = self.serializer(data=dict(input), context=context_for(ctx))
        if not instance.is_valid():
            issues = issues_from_errors(instance.errors, known)
            raise InputRejected(issues or [issue([], "invalid", known)])
        return instance.validated_data

    def call(self, handler: Callable[..., Any], value: Any, ctx: Any) -> Any:
        return handler(value, ctx)

    def dump(self, value: Any, ctx: Any) -> Any:
        return self.serializer(value, context=context_for(ctx)).data
