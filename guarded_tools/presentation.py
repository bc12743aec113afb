"""Compatibility path (issue 26's layers): the module lives at
``guarded_tools.pipeline.presentation``.

The README documents ``guarded_tools.presentation``; this module replaces itself in ``sys.modules``
with ``guarded_tools.pipeline.presentation``, so dotted-path settings, ``import_string`` and patches
reach one
module.
"""

import sys
from typing import TYPE_CHECKING

from guarded_tools.pipeline import presentation as _module

if TYPE_CHECKING:  # pragma: no cover - the names, for type checkers
    from guarded_tools.pipeline.presentation import *  # noqa: F403

sys.modules[__name__] = _module
