"""Matrix row: a psycopg pool whose ``reset`` runs ``DISCARD ALL`` on every returned connection."""

from typing import Any

from tests.matrix.settings_base import *  # noqa: F403
from tests.matrix.settings_base import on_postgresql


def discard_all(connection: Any) -> None:
    """The pool's reset: the session forgets everything, prepared statements included."""
    connection.execute("DISCARD ALL")


GT_MATRIX_ROW = "pool-discard-all"
on_postgresql(GT_MATRIX_ROW, pool={"reset": discard_all})
