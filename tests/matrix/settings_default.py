"""Matrix row: Django's defaults (SQLite, or PostgreSQL from DATABASE_URL)."""

from tests.matrix.settings_base import *  # noqa: F403

GT_MATRIX_ROW = "default"
