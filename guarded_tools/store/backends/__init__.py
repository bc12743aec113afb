"""Provides the store's backends: a faster ``OperationStore`` per database vendor.

As Django picks a database backend by ``ENGINE``, the default ``STORE_CLASS``
(:func:`by_vendor`) picks the store for the ``vendor`` of the database operations are
written to; a site's ``STORE_CLASS`` (a class or any callable returning a store) still
overrides it. Vendors without a backend get the ORM's ``OperationStore``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.db import connections, router
from django.utils.module_loading import import_string

from guarded_tools.models import Operation

__all__ = ["by_vendor", "features", "ops"]

#: vendor: the dotted path of its store class.
BACKENDS = {
    "postgresql": "guarded_tools.store.backends.postgresql.PostgreSQLOperationStore",
    "sqlite": "guarded_tools.store.backends.sqlite.SQLiteOperationStore",
}
DEFAULT = "guarded_tools.store.backends.base.OperationStore"
#: vendor: the module of its ``Features`` and ``Operations`` (``capabilities``' defaults).
FEATURES = {
    "postgresql": "guarded_tools.store.backends.postgresql",
    "sqlite": "guarded_tools.store.backends.sqlite",
}


@cache
def store_class(vendor: str) -> Any:
    """The store class for a database vendor (``connection.vendor``)."""
    return import_string(BACKENDS.get(vendor, DEFAULT))


def by_vendor() -> Any:
    """A store for the vendor of the database ``Operation`` is written to."""
    return store_class(connections[router.db_for_write(Operation)].vendor)()


@cache
def _classes(vendor: str) -> tuple[Any, Any]:
    from guarded_tools.store.backends.capabilities import StoreFeatures, StoreOperations

    module = FEATURES.get(vendor)
    if module is None:
        return StoreFeatures, StoreOperations
    return import_string(f"{module}.Features"), import_string(f"{module}.Operations")


def features(connection: Any) -> Any:
    """What the store can rely on ``connection``'s database for (a ``StoreFeatures``)."""
    return _classes(connection.vendor)[0](connection)


def ops(connection: Any) -> Any:
    """How the store does on ``connection``'s database what differs between databases
    (a ``StoreOperations``)."""
    return _classes(connection.vendor)[1](connection)
