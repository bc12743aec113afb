"""Provides Pydantic models as a tool's input and output (the ``guarded-tools[pydantic]`` extra).

``model_json_schema()`` is the schema agents see (JSON Schema 2020-12 already), with
every object closed unless the model says otherwise; ``model_validate`` is the model's
own validation, run right before the handler; its errors become ``invalid_input``
issues from their ``loc`` and ``type`` (Pydantic's messages quote the input: never used).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from guarded_tools.tools.binding import InputRejected, field_title, inline_defs, issue


def is_model(spec: Any) -> bool:
    try:
        from pydantic import BaseModel
    except ImportError:  # the extra is not installed: nothing is a model
        return False
    return isinstance(spec, type) and issubclass(spec, BaseModel)


def binding_for(spec: Any, direction: str) -> ModelBinding | None:
    """``spec``'s binding when it is a Pydantic model class (a source of ``tools.binding``)."""
    return ModelBinding(spec) if is_model(spec) else None


def closed(node: Any) -> Any:
    """Every object schema without its own ``additionalProperties`` made closed."""
    if isinstance(node, list):
        return [closed(item) for item in node]
    if not isinstance(node, dict):
        return node
    result = {key: closed(value) for key, value in node.items()}
    if result.get("type") == "object" and "properties" in result:
        result.setdefault("additionalProperties", False)
    return result


def issues_from(exc: Any, known: frozenset[str]) -> list[dict[str, Any]]:
    """A Pydantic ``ValidationError`` as issues: path from ``loc``, message from ``type``."""
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    return [issue(error.get("loc", ()), error.get("type", "invalid"), known) for error in errors]


@functools.cache
def titled_generator() -> Any:
    """Pydantic's JSON Schema generator, with a field's default title (one the model
    does not set) humanised as every derived title is (:func:`field_title`), not
    Pydantic's ``name.title()`` ("Operationid")."""
    from pydantic.json_schema import GenerateJsonSchema

    class TitledJsonSchema(GenerateJsonSchema):
        def get_title_from_name(self, name: str) -> str:
            return field_title(name)

    return TitledJsonSchema


class ModelBinding:
    """A Pydantic model class as a tool's input (the instance) or output (its JSON dump)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.problems: tuple[str, ...] = ()
        self.schema: dict[str, Any] = inline_defs(closed(model.model_json_schema(
            schema_generator=titled_generator())))

    def bind(self, input: Mapping[str, Any], ctx: Any, known: frozenset[str]) -> Any:
        from pydantic import ValidationError

        try:
            return self.model.model_validate(dict(input))
        except ValidationError as exc:
            raise InputRejected(issues_from(exc, known) or [issue([], "invalid", known)]) from None

    def call(self, handler: Callable[..., Any], value: Any, ctx: Any) -> Any:
        return handler(value, ctx)

    def dump(self, value: Any, ctx: Any) -> Any:
        instance = value if isinstance(value, self.model) else self.model.model_validate(value)
        return instance.model_dump(mode="json")
