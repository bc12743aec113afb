"""What every matrix row shares: the demo site's settings, one test database per row.

A row's settings module imports this and changes one thing; ``GT_MATRIX_ROW`` names it.
PostgreSQL rows take the server from DATABASE_URL (scripts/matrix.sh starts it).
"""

from project.settings import *  # noqa: F403
from project.settings import DATABASES

GT_MATRIX_ROW = "default"


def on_postgresql(row: str, **options: object) -> None:
    """Make ``default`` this row's PostgreSQL database, with ``options`` in its OPTIONS."""
    default = DATABASES["default"]
    if not default["ENGINE"].endswith("postgresql"):
        raise RuntimeError(f"matrix row {row!r} needs DATABASE_URL=postgres://...")
    default["OPTIONS"] = {**default.get("OPTIONS", {}), **options}
    # Its own test database: a row never finds another's.
    default["TEST"] = {"NAME": f"test_guarded_{row.replace('-', '_')}"}
