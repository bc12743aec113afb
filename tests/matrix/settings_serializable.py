"""Matrix row: PostgreSQL at SERIALIZABLE (``OPTIONS={"isolation_level": ...}``)."""

from django.db.backends.postgresql.psycopg_any import IsolationLevel

from tests.matrix.settings_base import *  # noqa: F403
from tests.matrix.settings_base import on_postgresql

GT_MATRIX_ROW = "serializable"
on_postgresql(GT_MATRIX_ROW, isolation_level=IsolationLevel.SERIALIZABLE)
