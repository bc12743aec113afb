"""Matrix row: PgBouncer in transaction mode, with DISABLE_SERVER_SIDE_CURSORS (Django's advice)."""

from tests.matrix.settings_base import *  # noqa: F403
from tests.matrix.settings_base import DATABASES, on_postgresql

GT_MATRIX_ROW = "pgbouncer"
on_postgresql(GT_MATRIX_ROW)
DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
# Migrates on its own, never from a copy (tests/dbcache.py): the deployment could change what a
# migration does.
GT_TEST_FRESH_MIGRATIONS = True
