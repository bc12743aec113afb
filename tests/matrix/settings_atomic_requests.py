"""Matrix row: ``ATOMIC_REQUESTS=True`` (every view in a transaction, except those opting out)."""

from tests.matrix.settings_base import *  # noqa: F403
from tests.matrix.settings_base import DATABASES

GT_MATRIX_ROW = "atomic-requests"
DATABASES["default"]["ATOMIC_REQUESTS"] = True
