"""Provides class-based tools, as DRF has class-based views: ``class SendPayment(GuardedTool)``.

A subclass declares ``name``, ``description`` (else its docstring), ``input`` and
``output`` (a JSON Schema dict, a DRF serializer class or a Pydantic model class), the
same options ``@tool`` takes as class attributes, and ``run(input, ctx)`` with any of
the hooks (``authorize``, ``context``, ``precheck``, ``present``, ``recover``,
``verify``, ``observe``...) as methods. Defining the class registers the very definition
``@tool`` would build, its hooks bound to one instance of the class; importing the app's
``tools`` module (autodiscovery) is what registers it, as for ``@tool``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from guarded_tools.core.definition import Tool
from guarded_tools.core.registry import ToolRegistry
from guarded_tools.core.registry import registry as default_registry
from guarded_tools.tools.registry import define

#: What a class may declare: ``@tool``'s options (the definition's own fields, less
#: those ``@tool`` derives itself).
_DERIVED = {"handler", "input", "output", "input_schema", "output_schema", "input_check",
            "schema_problems", "published_action"}
OPTIONS = tuple(f.name for f in dataclasses.fields(Tool) if f.init and f.name not in _DERIVED)


class GuardedTool:
    """A tool as a class. ``class Base(GuardedTool, abstract=True)`` registers nothing;
    ``registry=`` (a class keyword) registers into another registry than the default."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    input: ClassVar[Any] = None
    output: ClassVar[Any] = None
    #: The registered definition (``Tool``) of this class, set when the class is defined.
    definition: ClassVar[Tool]

    def __init_subclass__(
        cls, *, abstract: bool = False, registry: ToolRegistry | None = None, **kwargs: Any
    ) -> None:
        super().__init_subclass__(**kwargs)
        if abstract:
            return
        if not callable(getattr(cls, "run", None)):
            raise TypeError(f"{cls.__name__}: a GuardedTool defines run(self, input, ctx).")
        target = registry if registry is not None else default_registry
        cls.definition = target.register(cls.build())

    @classmethod
    def build(cls) -> Tool:
        """The definition ``@tool`` builds from the same options, hooks bound to one instance."""
        instance = cls()
        options: dict[str, Any] = {
            option: getattr(instance, option) for option in OPTIONS
            if option not in ("name", "description") and hasattr(instance, option)
        }
        options.update(_schemas("input", cls.input), **_schemas("output", cls.output))
        options.setdefault("module", cls.__module__)
        description = cls.description or (cls.__doc__ or "").strip()
        return define(name=cls.name or cls.__name__, handler=instance.run,  # type: ignore[attr-defined]
                      description=description, **options)


def _schemas(direction: str, spec: Any) -> dict[str, Any]:
    """``input``/``output`` as ``@tool``'s keywords: a dict is the schema, a class binds."""
    if spec is None:
        return {}
    if isinstance(spec, Mapping):
        return {f"{direction}_schema": spec}
    return {direction: spec}
