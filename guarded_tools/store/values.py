"""Provides what the store's transitions share: fingerprints, stored JSON, the claim's values.

Also the refusal to claim inside a caller's transaction (:class:`NestedTransaction`),
read from Django's documented ``in_atomic_block`` and ``atomic(durable=True)``.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from datetime import timedelta
from typing import Any, TypeVar

from django.core.exceptions import ImproperlyConfigured
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models, transaction
from django.db.models import DateTimeField, ExpressionWrapper, Value
from django.db.models.functions import Now

from guarded_tools.core.call import user_row as user_row  # re-exported
from guarded_tools.core.jsonvalues import JSON_ENCODER as JSON_ENCODER  # re-exported
from guarded_tools.core.jsonvalues import storable_json as storable_json
from guarded_tools.models import OperationState

CounterT = TypeVar("CounterT", bound=models.Model)

#: First key of the advisory locks taken on PostgreSQL (``pg_try_advisory_xact_lock(int, int)``):
#: "gt" and 1, so that the locks are recognisable in ``pg_locks`` (``classid``).
LOCK_CLASS = 0x6774_0001
COMPLETED = (OperationState.SUCCEEDED, OperationState.FAILED, OperationState.OUTCOME_UNKNOWN)
NESTED_TRANSACTION = (
    "guarded_tools must commit its claim before the handler runs, but it was called"
    " inside a transaction (ATOMIC_REQUESTS or transaction.atomic). Call tools outside"
    " transactions; use atomic=True on the tool for a same-database effect."
)

#: Encoders are stateless between calls: one of each serves every call (and thread).
_CANONICAL = DjangoJSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class NestedTransaction(ImproperlyConfigured):
    """A claim was asked for inside a caller's transaction, where it could not commit first."""


def refuse_enclosing_transaction(connection: Any) -> None:
    """Refuse to claim inside a caller's transaction, as a durable atomic block would.

    Outside any block (autocommit, every production call) this costs nothing. Inside
    one, an empty ``atomic(durable=True)`` block says whether the block is the caller's
    (it raises) or a test case's (Django's ``TestCase``, pytest-django's ``django_db``:
    allowed, as Django allows durable blocks there).
    """
    if not connection.in_atomic_block:
        return
    try:
        with transaction.atomic(using=connection.alias, durable=True):
            pass
    except RuntimeError as exc:
        raise NestedTransaction(NESTED_TRANSACTION) from exc


def locked_counter(model: type[CounterT], using: str, **identity: Any) -> CounterT:
    """The counter row of ``model`` that ``identity`` names (a budget's or an allowance's
    for one window), created if missing, then locked for the caller's transaction
    (``select_for_update``; on SQLite the write transaction serialises).

    Call it inside ``transaction.atomic(using=using)``: the lock lasts until the block
    ends, so two calls counting against one row are serialised by it.
    """
    counters = model._default_manager.using(using)
    counter, _ = counters.get_or_create(**identity)
    counters.select_for_update().filter(pk=counter.pk).first()  # the lock
    return counter


def fingerprint(value: Any) -> str:
    """SHA-256 of canonical JSON: the same input always has the same fingerprint."""
    return digest(canonical(value))


def canonical(value: Any) -> str:
    """``value`` as canonical JSON (sorted keys, no spaces): the text a fingerprint digests.
    Two values have the same fingerprint exactly when they have the same canonical text."""
    return _CANONICAL.encode(value)  # type: ignore[no-any-return]


def digest(text: str) -> str:
    """The fingerprint of a canonical text (:func:`canonical`)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def db_now_plus(seconds: float) -> ExpressionWrapper:
    """``now() + seconds`` evaluated by the database, never by this process."""
    return ExpressionWrapper(
        Now() + Value(timedelta(seconds=seconds)), output_field=DateTimeField()
    )


def new_token() -> str:
    """A fresh random owner token for a claim."""
    return uuid.uuid4().hex


def fresh_values(
    *, tool: str, scope: str, key: str, fp: str, input: Any, user: Any
) -> dict[str, Any]:
    """A fresh claim's values by attname; the columns left out are NULL or the clock's.

    Its id (a version 4 UUID) and its owner token come from one read of the system's
    randomness, as two ``uuid4()`` calls would from two.
    """
    random = os.urandom(32)
    return {
        "id": uuid.UUID(bytes=random[:16], version=4),
        "tool": tool,
        "scope": scope,
        "key": key,
        "user_id": user.pk if user is not None else None,
        "fingerprint": fp,
        "input": input,
        "state": OperationState.IN_FLIGHT.value,
        "owner": random[16:].hex(),
        "fence": 1,
        "recovered": False,
        "reconciled": False,
        "attempts": 1,
        "release_reason": "",
    }


def key_hash(tool: str, scope: str, key: str) -> int:
    """A signed 32-bit hash of the key: the second key of its advisory lock."""
    digest = hashlib.blake2b(f"{tool}\0{scope}\0{key}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)
