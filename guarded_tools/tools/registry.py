"""Provides the registry of tool definitions, the ``@tool`` decorator and ``guard()``.

The registry registers, unregisters, resets and finds definitions; autodiscovery fills
it from every installed app's ``tools`` module. The registry object lives in
``guarded_tools.core.registry`` (so the pipeline finds definitions without importing this
layer) and the definition itself (``Tool``) in ``guarded_tools.core.definition``; both
are re-exported here for existing imports.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from guarded_tools.core.definition import (
    AFTER_CLAIM_MODES,
    CONFIRM_MODES,
    Handler,
    Tool,
)
from guarded_tools.core.registry import (
    AlreadyRegistered,
    NotRegistered,
    ToolRegistry,
    registry,
)
from guarded_tools.tools.binding import bound_options

__all__ = [
    "AFTER_CLAIM_MODES",
    "CONFIRM_MODES",
    "AlreadyRegistered",
    "Handler",
    "NotRegistered",
    "Tool",
    "ToolRegistry",
    "autodiscover",
    "guard",
    "registry",
    "tool",
]


def tool(
    name: str | None = None, *, registry: ToolRegistry | None = None, **options: Any
) -> Callable[[Handler], Tool]:
    """Register the decorated ``handler(input, ctx)`` as an agent-callable tool."""
    target = registry if registry is not None else globals()["registry"]

    def decorator(handler: Handler) -> Tool:
        description = options.pop("description", None) or (handler.__doc__ or "").strip()
        definition = define(
            name=name or handler.__name__, handler=handler, description=description, **options
        )
        return target.register(definition)

    return decorator


def guard(execute: Handler, **options: Any) -> Tool:
    """Wrap a plain ``execute(input, ctx)`` with the same pipeline, without HTTP.

    The result is not registered; call it with ``principal=`` (or ``user=``) and
    ``idempotency_key=`` when it has an effect.
    """
    options.setdefault("name", getattr(execute, "__name__", None) or type(execute).__name__)
    options.setdefault("allow_anonymous", True)
    return define(handler=execute, **options)


def define(**options: Any) -> Tool:
    """The definition ``@tool(**options)`` registers: the schemas derived from ``input=``,
    ``output=`` or the handler's type hints, then every field built once."""
    return Tool.build(**bound_options(options))


def autodiscover() -> None:
    """Import the ``tools`` module of every installed app."""
    from django.utils.module_loading import autodiscover_modules

    autodiscover_modules("tools")
