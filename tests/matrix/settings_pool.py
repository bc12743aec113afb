"""Matrix row: Django's native psycopg connection pool (``OPTIONS={"pool": True}``)."""

from tests.matrix.settings_base import *  # noqa: F403
from tests.matrix.settings_base import on_postgresql

GT_MATRIX_ROW = "pool"
on_postgresql(GT_MATRIX_ROW, pool=True)
