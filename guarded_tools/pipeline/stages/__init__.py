"""Provides the stages of a call (one module each) and the stage list a tool's calls walk.

The list is the ``STAGES`` setting (import strings, in order), or a tool's own ``stages``
(classes or import strings), as DRF takes ``permission_classes`` from settings or a view.
A site adds a stage by listing its class, and replaces one by listing its class in the
built-in one's place; no pipeline subclass is needed. An optional integration needs no
stage of its own to check what its credentials grant: it registers a credential kind
(:mod:`guarded_tools.core.credentials`), which the authorization stage asks.
"""

from __future__ import annotations

import functools
from typing import Any

from django.utils.module_loading import import_string

from guarded_tools.conf import DEFAULTS, gt_settings
from guarded_tools.pipeline.stages.base import HOOKS, Call, Stage

#: The built-in stages, in the order a call meets them (the ``STAGES`` setting's default).
DEFAULT_STAGES: list[str] = list(DEFAULTS["STAGES"])


def stage_classes(definition: Any) -> tuple[type[Stage], ...]:
    """The stage classes a call of ``definition`` walks, in order."""
    listed = getattr(definition, "stages", None)
    return _resolve(tuple(listed if listed is not None else gt_settings.STAGES))


@functools.lru_cache(maxsize=64)
def _resolve(configured: tuple[Any, ...]) -> tuple[type[Stage], ...]:
    """The classes of a stage list, imported once per list (the lists a site's settings
    and tools name are few; a bounded cache all the same)."""
    return tuple(import_string(c) if isinstance(c, str) else c for c in configured)


__all__ = ["DEFAULT_STAGES", "HOOKS", "Call", "Stage"]
