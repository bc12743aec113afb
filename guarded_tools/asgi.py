"""Compatibility path (issue 26's layers): the module lives at ``guarded_tools.transports.asgi``.

The README documents ``guarded_tools.asgi``; this module replaces itself in ``sys.modules``
with ``guarded_tools.transports.asgi``, so dotted-path settings, ``import_string`` and patches
reach one
module.
"""

import sys
from typing import TYPE_CHECKING

from guarded_tools.transports import asgi as _module

if TYPE_CHECKING:  # pragma: no cover - the names, for type checkers
    from guarded_tools.transports.asgi import *  # noqa: F403

sys.modules[__name__] = _module
