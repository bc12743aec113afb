"""Matrix row: PgBouncer in transaction mode, without DISABLE_SERVER_SIDE_CURSORS."""

from tests.matrix.settings_base import *  # noqa: F403
from tests.matrix.settings_base import on_postgresql

GT_MATRIX_ROW = "pgbouncer-plain"
on_postgresql(GT_MATRIX_ROW)
