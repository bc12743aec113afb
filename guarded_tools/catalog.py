"""Compatibility path (issue 26's layers): the module lives at ``guarded_tools.core.catalog``.

The README documents ``guarded_tools.catalog``; this module replaces itself in ``sys.modules``
with ``guarded_tools.core.catalog``, so dotted-path settings, ``import_string`` and patches reach
one
module.
"""

import sys
from typing import TYPE_CHECKING

from guarded_tools.core import catalog as _module

if TYPE_CHECKING:  # pragma: no cover - the names, for type checkers
    from guarded_tools.core.catalog import *  # noqa: F403

sys.modules[__name__] = _module
