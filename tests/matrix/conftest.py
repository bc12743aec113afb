"""The matrix's guarantees run only under a row's settings (``scripts/matrix.sh``).

Elsewhere they are collected and skipped. Under a row, what the server and the app
logged is kept from the start, so the last test can say that nothing failed on the way.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent


class Recorded(logging.Handler):
    """Every warning (or worse) the app logs during the row's run."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


APP_WARNINGS = Recorded()
#: The PostgreSQL server's log (scripts/pg.sh's), and how long it was when the tests began.
SERVER_LOG = Path(os.environ["GT_MATRIX_PG_LOG"]) if os.environ.get("GT_MATRIX_PG_LOG") else None
SERVER_LOG_START = [0]


@pytest.fixture(scope="session", autouse=True)
def _server_log_from_here(django_db_setup: Any) -> None:
    """Read the server's log from after the test database was set up."""
    if SERVER_LOG is not None and SERVER_LOG.exists():
        SERVER_LOG_START[0] = SERVER_LOG.stat().st_size


def row() -> str | None:
    from django.conf import settings

    return getattr(settings, "GT_MATRIX_ROW", None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if row() is not None:
        logging.getLogger("guarded_tools").addHandler(APP_WARNINGS)
        return
    skip = pytest.mark.skip(reason="a deployment matrix guarantee: scripts/matrix.sh runs it")
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(skip)


def server_errors() -> list[str]:
    """The ERROR (or worse) lines the PostgreSQL server logged since the tests began."""
    if SERVER_LOG is None:
        return []
    with SERVER_LOG.open("rb") as log:
        log.seek(SERVER_LOG_START[0])
        lines = log.read().decode("utf-8", "replace").splitlines()
    return [line for line in lines if any(f"{level}:  " in line for level in
                                          ("ERROR", "FATAL", "PANIC"))]


@pytest.fixture
def matrix_row() -> Any:
    return row()
