"""Provides the stages of a call (one module each) and the stage list a tool's calls walk.

The list is the ``STAGES`` setting (import strings, in order), or a tool's own ``stages``
(classes or import strings), as DRF takes ``permission_classes`` from settings or a view.
A site adds a stage by listing its class, and replaces one by listing its class in the
built-in one's place; no pipeline subclass is needed. An optional integration adds its
stage when its app is installed (``insert_before``, called from ``AppConfig.ready()``):
django-oauth-toolkit's scope check goes before ``authorization`` in every list.
"""

from __future__ import annotations

from typing import Any

from django.utils.module_loading import import_string

from guarded_tools.conf import DEFAULTS, gt_settings
from guarded_tools.pipeline.stages.base import HOOKS, Call, Stage

#: The built-in stages, in the order a call meets them (the ``STAGES`` setting's default).
DEFAULT_STAGES: list[str] = list(DEFAULTS["STAGES"])

#: (stage's import string, name of the stage it goes before), from installed integrations.
_inserted: list[tuple[str, str]] = []
_resolved: dict[tuple[Any, ...], tuple[type[Stage], ...]] = {}


def insert_before(name: str, path: str) -> None:
    """Put the stage at ``path`` before the stage called ``name`` in every stage list."""
    if (path, name) not in _inserted:
        _inserted.append((path, name))
        _resolved.clear()


def stage_classes(definition: Any) -> tuple[type[Stage], ...]:
    """The stage classes a call of ``definition`` walks, in order."""
    listed = getattr(definition, "stages", None)
    configured = tuple(listed if listed is not None else gt_settings.STAGES)
    found = _resolved.get(configured)
    if found is None:
        found = _resolved[configured] = _resolve(configured)
    return found


def _resolve(configured: tuple[Any, ...]) -> tuple[type[Stage], ...]:
    classes = [import_string(c) if isinstance(c, str) else c for c in configured]
    for path, before in _inserted:
        extra = import_string(path)
        if extra in classes:
            continue
        at = next((i for i, cls in enumerate(classes) if cls.name == before), None)
        if at is not None:
            classes.insert(at, extra)
    return tuple(classes)


__all__ = ["DEFAULT_STAGES", "HOOKS", "Call", "Stage", "insert_before"]
