"""Matrix row: psycopg 3's server-side binding (``OPTIONS={"server_side_binding": True}``)."""

from tests.matrix.settings_base import *  # noqa: F403
from tests.matrix.settings_base import on_postgresql

GT_MATRIX_ROW = "server-side-binding"
on_postgresql(GT_MATRIX_ROW, server_side_binding=True)
# Migrates on its own, never from a copy (tests/dbcache.py): the deployment could change what a
# migration does.
GT_TEST_FRESH_MIGRATIONS = True
