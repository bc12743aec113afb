"""Provides the ``@tool`` decorator, ``guard()`` and the autodiscovery of tools.

``@tool`` registers a definition (``guarded_tools.core.definition.Tool``) in the registry
(``guarded_tools.core.registry``), which lives below this layer so that the pipeline finds
definitions without importing it; autodiscovery fills it from every installed app's
``tools`` module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from guarded_tools.core.definition import Handler, Tool
from guarded_tools.core.registry import ToolRegistry
from guarded_tools.core.registry import registry as default_registry
from guarded_tools.tools.binding import bound_options

__all__ = ["autodiscover", "define", "guard", "tool"]


def tool(
    name: str | None = None, *, registry: ToolRegistry | None = None, **options: Any
) -> Callable[[Handler], Tool]:
    """Register the decorated ``handler(input, ctx)`` as an agent-callable tool."""
    target = registry if registry is not None else default_registry

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
