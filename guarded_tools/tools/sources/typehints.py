"""Provides a handler's own type hints as its tool's input: ``def f(order_id: int, *, ctx)``.

The parameters before ``ctx`` become a Pydantic model (``pydantic.create_model``, the
``guarded-tools[pydantic]`` extra), so the schema, the validation and the errors are
those of :mod:`guarded_tools.tools.sources.pydantic`; the handler is called with keyword arguments.
A parameter's ``Annotated[int, Field(description=...)]`` describes it to agents.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

from guarded_tools.tools.sources.pydantic import ModelBinding


def signature_model(handler: Callable[..., Any]) -> Any:
    """A Pydantic model with one field per parameter of ``handler`` other than ``ctx``."""
    try:
        from pydantic import ConfigDict, create_model
    except ImportError:
        raise ImportError(
            "A tool whose input is its handler's type hints needs Pydantic:"
            " pip install 'guarded-tools[pydantic]'."
        ) from None
    hints = typing.get_type_hints(handler, include_extras=True)
    fields: dict[str, Any] = {}
    for name, parameter in inspect.signature(handler).parameters.items():
        if name == "ctx":
            continue
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise ValueError(f"Handler {handler.__name__!r}: *args and **kwargs have no schema.")
        annotation = hints.get(name, Any)
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[name] = (annotation, default)
    title = "".join(part.capitalize() for part in handler.__name__.split("_")) or "Input"
    return create_model(  # type: ignore[call-overload]
        title, __config__=ConfigDict(extra="forbid"), **fields
    )


class SignatureBinding(ModelBinding):
    """The handler's parameters as a model; the handler gets them as keyword arguments."""

    def __init__(self, handler: Callable[..., Any]) -> None:
        super().__init__(signature_model(handler))

    def call(self, handler: Callable[..., Any], value: Any, ctx: Any) -> Any:
        arguments = {name: getattr(value, name) for name in type(value).model_fields}
        return handler(**arguments, ctx=ctx)
