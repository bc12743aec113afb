"""Provides the stores the ablation measures without a speed-up (``BENCH_ABLATE``).

Selected through ``STORE_CLASS``, as a site would: the production code has no switch.
"""

from __future__ import annotations

from guarded_tools.store.backends.postgresql import PostgreSQLOperationStore


class OneByOne(PostgreSQLOperationStore):
    """PostgreSQL's store sending its statements one per execute ("multi" off), as with
    psycopg 2 or server-side binding."""

    @property
    def multi(self) -> bool:
        return False
