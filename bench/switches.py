"""Provides ``store_for``: the ``STORE_CLASS`` of an ablation's switches (``BENCH_ABLATE``).

Imports nothing of Django's or the app's: the bench's settings read it.
"""

from __future__ import annotations

#: switch: the store without the speed-up it names ("orm": no PostgreSQL backend at all).
STORES = {"multi": "bench.stores.OneByOne", "orm": "guarded_tools.store.OperationStore"}


def store_for(switches: set[str] | frozenset[str]) -> str:
    """``STORE_CLASS`` for a set of switches (the default's path when none is a store's)."""
    for switch in ("orm", "multi"):
        if switch in switches:
            return STORES[switch]
    return "guarded_tools.store.backends.by_vendor"
