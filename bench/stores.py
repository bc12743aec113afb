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


#: switch: the store without the speed-up it names ("orm": no PostgreSQL backend at all).
STORES = {"multi": "bench.stores.OneByOne", "orm": "guarded_tools.store.OperationStore"}


def store_for(switches: set[str] | frozenset[str]) -> str:
    """``STORE_CLASS`` for a set of switches (the default's path when none is a store's)."""
    for switch in ("orm", "multi"):
        if switch in switches:
            return STORES[switch]
    return "guarded_tools.store.backends.by_vendor"
