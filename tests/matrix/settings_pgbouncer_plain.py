"""Matrix row: PgBouncer in transaction mode, without DISABLE_SERVER_SIDE_CURSORS."""

from tests.matrix.settings_base import *  # noqa: F403
from tests.matrix.settings_base import on_postgresql

GT_MATRIX_ROW = "pgbouncer-plain"
on_postgresql(GT_MATRIX_ROW)
# Migrates on its own, never from a copy (tests/dbcache.py): the deployment could change what a
# migration does.
GT_TEST_FRESH_MIGRATIONS = True
