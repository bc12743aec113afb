"""Provides the model-backed idempotency store and the journal's operation handle.

``OperationStore`` (``backends.base``) does every transition on Django's ORM; the backends
(``backends``) do some faster on one database, chosen by its vendor as Django
chooses a database backend by ``ENGINE``, unless ``STORE_CLASS`` says otherwise.
"""

from __future__ import annotations

from guarded_tools.store.backends.base import Claim, ClaimKind, Locked, LockState, OperationStore
from guarded_tools.store.backends.postgresql import reads_committed
from guarded_tools.store.handles import OperationHandle, PendingOperationHandle
from guarded_tools.store.values import (
    COMPLETED,
    JSON_ENCODER,
    LOCK_CLASS,
    NESTED_TRANSACTION,
    NestedTransaction,
    db_now_plus,
    fingerprint,
    key_hash,
    new_token,
    refuse_enclosing_transaction,
    storable_json,
    user_row,
)

__all__ = [
    "COMPLETED", "JSON_ENCODER", "LOCK_CLASS", "NESTED_TRANSACTION", "Claim", "ClaimKind",
    "LockState", "Locked", "NestedTransaction", "OperationHandle", "OperationStore",
    "PendingOperationHandle", "db_now_plus", "fingerprint", "key_hash", "new_token",
    "reads_committed", "refuse_enclosing_transaction", "storable_json", "user_row",
]
