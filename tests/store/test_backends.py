"""The store's backends (issue 26 item 3): chosen by the database's vendor, as Django
chooses a database backend by ENGINE, and overridden by ``STORE_CLASS``."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from guarded_tools.models import Operation, OperationState
from guarded_tools.store import NestedTransaction, OperationStore
from guarded_tools.store.backends.postgresql import PostgreSQLOperationStore
from guarded_tools.store.backends.sqlite import SQLiteOperationStore

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMA = {"type": "object", "properties": {"operationId": {"type": "string"},
                                           "name": {"type": "string"}},
          "required": ["operationId", "name"]}
used: list[type] = []


def effect(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"id": Group.objects.create(name=input["name"]).pk}


class CountingStore(OperationStore):
    """A site's store: the ORM's, counting its claims."""

    def claim(self, **kwargs: Any) -> Any:
        used.append(type(self))
        return super().claim(**kwargs)


class Recording(PostgreSQLOperationStore):
    def claim(self, **kwargs: Any) -> Any:
        used.append(type(self))
        return super().claim(**kwargs)


class RecordingSQLite(SQLiteOperationStore):
    def claim(self, **kwargs: Any) -> Any:
        used.append(type(self))
        return super().claim(**kwargs)


#: vendor: the store its calls get by default, and its recording subclass.
VENDORS = {"postgresql": (PostgreSQLOperationStore, Recording),
           "sqlite": (SQLiteOperationStore, RecordingSQLite)}


def clients(alice: Any) -> dict[str, APIClient]:
    token, session = APIClient(), APIClient()
    token.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=alice).key}")
    session.force_login(alice)
    return {"token": token, "session": session}


@pytest.mark.parametrize("auth", ["token", "session"])
@pytest.mark.parametrize("atomic", [False, True])
def test_the_default_store_is_the_vendors_and_a_site_overrides_it(
    auth: str, atomic: bool, make_tool: Any, alice: Any, settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from guarded_tools.store import backends

    definition = make_tool(effect, input_schema=SCHEMA, atomic=atomic)
    client = clients(alice)[auth]
    # The default: the vendor's backend (PostgreSQL's, SQLite's), the ORM's store elsewhere.
    backends.store_class.cache_clear()
    monkeypatch.setitem(backends.BACKENDS, "postgresql", f"{__name__}.Recording")
    monkeypatch.setitem(backends.BACKENDS, "sqlite", f"{__name__}.RecordingSQLite")
    used.clear()
    body = {"operationId": uuid.uuid4().hex, "name": f"g-{uuid.uuid4().hex[:8]}"}
    response = client.post(f"/agent/tools/{definition.name}/", body, format="json")
    backends.store_class.cache_clear()
    assert response.status_code == 200, response.content
    claimed = used == [VENDORS[connection.vendor][1]] if connection.vendor in VENDORS \
        else used == []
    assert claimed or (atomic and used == []), used  # an atomic tool may lock, not claim
    assert Operation.objects.get(key=body["operationId"]).state == OperationState.SUCCEEDED
    # A site's STORE_CLASS wins over the vendor's.
    settings.GUARDED_TOOLS = {**(getattr(settings, "GUARDED_TOOLS", None) or {}),
                              "STORE_CLASS": f"{__name__}.CountingStore",
                              "ATOMIC_SINGLE_TRANSACTION": False}
    used.clear()
    body = {"operationId": uuid.uuid4().hex, "name": f"g-{uuid.uuid4().hex[:8]}"}
    response = client.post(f"/agent/tools/{definition.name}/", body, format="json")
    assert response.status_code == 200, response.content
    assert used == [CountingStore]
    again = client.post(f"/agent/tools/{definition.name}/", body, format="json")
    assert again.status_code == 200 and again.json()["operation"]["replayed"] is True
    assert again.json()["output"] == response.json()["output"]
    assert Group.objects.filter(name=body["name"]).count() == 1


@pytest.mark.parametrize("store", [OperationStore, PostgreSQLOperationStore,
                                   pytest.param(SQLiteOperationStore, marks=pytest.mark.sqlite)])
def test_each_store_refuses_to_claim_inside_a_callers_transaction(store: type) -> None:
    if store is not OperationStore and store is not VENDORS[connection.vendor][0]:
        pytest.skip(f"{store.__name__} is another database's")
    with pytest.raises(NestedTransaction), transaction.atomic():
        store().claim(tool="t", scope="s", key="k", fp="f", input={}, user=None,
                      lease_seconds=30)
    assert not Operation.objects.exists()


def test_the_vendors_store_reads_and_writes_operations_as_the_orm_does(alice: Any) -> None:
    """The backend's hand-written statements give the operations the ORM would: the same
    values, of the same types (UUIDs, aware datetimes, booleans, decoded JSON), whether
    claimed, read by its key or inserted completed by an atomic call."""
    from guarded_tools.store.backends import store_class

    store = store_class(connection.vendor)()
    assert isinstance(store, VENDORS[connection.vendor][0])
    names = [f.attname for f in Operation._meta.concrete_fields if f.name != "input"]

    def same(operation: Operation, key: str) -> None:
        orm = Operation.objects.defer("input").get(key=key)
        for name in names:
            mine, theirs = getattr(operation, name), getattr(orm, name)
            assert (mine, type(mine)) == (theirs, type(theirs)), name

    claim = store.claim(tool="t", scope="s", key="claimed", fp="f", input={"a": [1, "b"]},
                        user=alice, lease_seconds=30)
    assert claim.kind == "fresh" and claim.operation.user == alice
    same(claim.operation, "claimed")
    assert store.complete(claim, {"done": True, "at": "x"})
    operation, db_now = store.load("t", "s", "claimed")  # type: ignore[misc]
    same(operation, "claimed")
    assert operation.output == {"done": True, "at": "x"} and operation.state == "succeeded"
    assert db_now.tzinfo is not None
    assert abs((db_now - Operation.objects.get(key="claimed").updated_at).total_seconds()) < 60
    assert store.load("t", "s", "no such key") is None
    # An atomic call's operation, inserted already succeeded, with its journal and history.
    with transaction.atomic(durable=True):
        assert store.lock_key(tool="t", scope="s", key="atomic").state == "locked"
        pending = store.pending(tool="t", scope="s", key="atomic", fp="f", input={"n": 1},
                                user=alice)
        store.insert_completed(pending, {"id": 7}, [[{"step": 1}, False]])
    operation, _ = store.load("t", "s", "atomic")  # type: ignore[misc]
    same(operation, "atomic")
    assert (operation.state, operation.output, operation.owner) == ("succeeded", {"id": 7}, "")
    row = Operation.objects.get(key="atomic")
    assert row.completed_at is not None
    assert list(row.journal.values_list("data", "removed")) == [({"step": 1}, False)]
    assert list(row.events.values_list("kind", flat=True)) == ["claimed", "journal",
                                                              "succeeded"]


@pytest.mark.parametrize("recovered", [False, True])
def test_a_completion_records_its_history_as_the_orm_store_does(alice: Any,
                                                                recovered: bool) -> None:
    """The vendor's completion (on PostgreSQL one statement with its events) leaves the
    events the ORM store's leaves, in the same order and with the same values; and when
    its compare-and-set fails (the claim was taken over) neither writes an event."""
    from guarded_tools.store.backends import store_class

    def completed(store: OperationStore, key: str) -> list[tuple[Any, ...]]:
        claim = store.claim(tool="t", scope="s", key=key, fp="f", input={}, user=alice,
                            lease_seconds=30)
        assert store.complete(claim, {"n": 1}, recovered=recovered)
        assert not claim.unrecorded
        stale = store.claim(tool="t", scope="s", key=key + "-stale", fp="f", input={},
                            user=alice, lease_seconds=30)
        Operation.objects.filter(pk=stale.operation.pk).update(fence=stale.fence + 1)
        assert not store.complete(stale, {"n": 2}, recovered=recovered)
        assert not Operation.objects.get(pk=stale.operation.pk).events.exists()
        row = Operation.objects.get(key=key)
        assert row.state == "succeeded" and row.recovered is recovered
        return list(row.events.order_by("id").values_list("kind", "actor", "fence",
                                                          "details"))

    mine = completed(store_class(connection.vendor)(), "vendor")
    assert mine == completed(OperationStore(), "orm")
    assert [kind for kind, *_ in mine] == ["claimed", "succeeded"]
    assert mine[-1][3] == ({"recovered": True} if recovered else {})


def test_without_insert_returning_the_claim_is_the_orms(monkeypatch: pytest.MonkeyPatch,
                                                         alice: Any) -> None:
    """SQLite before 3.35 has no ``INSERT … RETURNING``: the vendor's store claims as the
    ORM's does there, and the claim means the same."""
    from guarded_tools.store.backends import store_class

    store = store_class(connection.vendor)()
    monkeypatch.setattr(connection.features, "can_return_columns_from_insert", False)
    with CaptureQueriesContext(connection) as sent:
        claim = store.claim(tool="t", scope="s", key="old", fp="f", input={}, user=alice,
                            lease_seconds=30)
    assert not [q for q in sent.captured_queries if "RETURNING" in q["sql"]], sent
    again = store.claim(tool="t", scope="s", key="old", fp="f", input={}, user=alice,
                        lease_seconds=30)
    assert (claim.kind, again.kind) == ("fresh", "in_flight")
    assert Operation.objects.get(key="old").owner == claim.owner


@pytest.mark.django_db
def test_the_pending_operation_is_what_its_values_make_by_keyword(alice: Any) -> None:
    """``pending()`` builds the operation by position (as ``Model.from_db`` builds rows):
    every value it is given must be a column's, and the row must be the one the values
    make by keyword (a field default a later edit adds would be lost by position)."""
    from guarded_tools.store.values import fresh_values

    values = fresh_values(tool="t", scope="s", key="k", fp="f", input={"a": 1}, user=alice)
    attnames = [f.attname for f in Operation._meta.concrete_fields]
    assert set(values) <= set(attnames)
    left_out = [f for f in Operation._meta.concrete_fields if f.attname not in values]
    assert all(not f.has_default() for f in left_out), [f.name for f in left_out]
    claim = OperationStore().pending(tool="t", scope="s", key="k", fp="f", input={"a": 1},
                                     user=alice)
    made = Operation(**{**values, "id": claim.operation.pk, "owner": claim.operation.owner})
    assert [getattr(claim.operation, a) for a in attnames] == [getattr(made, a) for a in attnames]
    assert claim.operation.user is alice  # attached: no query to read it
    assert claim.unrecorded and claim.unrecorded[0].kind == "claimed"


def row_of(operation: Operation) -> Operation:
    return Operation.objects.get(pk=operation.pk)


@pytest.mark.parametrize("vendor", [False, True], ids=["orm", "vendor"])
def test_a_transition_leaves_its_operation_as_a_read_would_without_reading(
        alice: Any, vendor: bool) -> None:
    """After the claim, an atomic call's INSERT and a takeover, the operation holds what
    its row holds: the values the statement wrote, those of the database's clock loaded
    when first read (one SELECT at most, none where the INSERT returned them), and its
    user attached (no query), on Django 6 and 5.2 alike."""
    from guarded_tools.store.backends import store_class

    store = store_class(connection.vendor)() if vendor else OperationStore()
    claim = store.claim(tool="t", scope="s", key="fresh", fp="f", input={"a": 1}, user=alice,
                        lease_seconds=30)
    with CaptureQueriesContext(connection) as sent:
        assert claim.operation.user == alice
        assert claim.operation.lease_expires_at == row_of(claim.operation).lease_expires_at
    assert len(sent.captured_queries) <= 2, sent.captured_queries  # the row_of, one load

    with transaction.atomic(durable=True):
        assert store.lock_key(tool="t", scope="s", key="atomic").state == "locked"
        pending = store.pending(tool="t", scope="s", key="atomic", fp="f", input={},
                                user=alice)
        store.insert_completed(pending, {"id": 7}, [])
    operation = pending.operation
    with CaptureQueriesContext(connection) as sent:
        assert operation.user == alice and operation.state == "succeeded"
    assert sent.captured_queries == []
    assert operation.completed_at in (None, row_of(operation).completed_at)  # None: not read back

    Operation.objects.filter(pk=claim.operation.pk).update(state=OperationState.ABANDONED)
    abandoned = Operation.objects.select_related("user").defer("input").get(pk=claim.operation.pk)
    with CaptureQueriesContext(connection) as sent:
        taken = store.takeover(abandoned, 60)
        assert taken is not None and taken.operation.user == alice
        assert (taken.operation.state, taken.operation.owner, taken.operation.fence) == (
            OperationState.IN_FLIGHT, taken.owner, 2)
    assert len(sent.captured_queries) == 1, sent.captured_queries  # the compare-and-set
    row = row_of(taken.operation)
    with CaptureQueriesContext(connection) as sent:
        assert taken.operation.lease_expires_at == row.lease_expires_at
        assert taken.operation.updated_at == row.updated_at
        assert taken.operation.input == {"a": 1}  # deferred before, still deferred
    assert len(sent.captured_queries) == 3, sent.captured_queries  # one load each
    assert row.lease_expires_at > claim.operation.lease_expires_at


@pytest.mark.once
def test_only_the_store_backends_ask_which_database_they_are_on() -> None:
    """Generic code asks the store's ``features``/``ops`` objects, as Django's generic code
    asks ``connection.features`` and ``connection.ops``, never ``connection.vendor``, nor
    a database's ``ENGINE``, nor names a database in a string to compare with."""
    import re
    from pathlib import Path

    import guarded_tools

    asks = re.compile(r"vendor ?[!=]=|\.vendor\b|[\[(]\s*[\"']ENGINE[\"']"
                      r"|[\"'](sqlite3?|postgres(ql)?|mysql|oracle)[\"']")
    root = Path(guarded_tools.__file__).parent
    found = [f"{path.relative_to(root)}:{number}" for path in sorted(root.rglob("*.py"))
             if not path.relative_to(root).as_posix().startswith("store/backends/")
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if asks.search(line)]
    assert found == []


@pytest.mark.once
def test_a_database_without_a_backend_gets_the_defaults() -> None:
    """No key lock (atomic tools claim first), no row estimate (exact counts); and each
    backend's answers follow its database's OPTIONS."""
    from types import SimpleNamespace

    from guarded_tools.store.backends import features, ops

    def db(vendor: str, **options: Any) -> Any:
        return SimpleNamespace(vendor=vendor, settings_dict={"OPTIONS": options})

    mysql = db("mysql")
    assert not features(mysql).can_lock_keys and not features(mysql).estimates_rows
    assert ops(mysql).key_lock(1, 2) is None and ops(mysql).estimate_rows(None) is None
    assert features(db("sqlite", transaction_mode="IMMEDIATE")).can_lock_keys
    assert not features(db("sqlite")).can_lock_keys
    assert ops(db("sqlite")).key_lock(1, 2) is None  # the transaction holds the write lock
    postgresql = db("postgresql")
    assert features(postgresql).can_lock_keys and features(postgresql).estimates_rows
    assert not features(db("postgresql", isolation_level=3)).can_lock_keys  # SERIALIZABLE
    assert ops(postgresql).key_lock(1, 2) == ("SELECT pg_try_advisory_xact_lock(%s, %s)", [1, 2])
    # What the system checks ask of a database's settings (W002, W005).
    assert features(mysql).begins_with_write_lock
    assert not features(mysql).isolation_above_read_committed
    assert features(db("sqlite", transaction_mode="immediate")).begins_with_write_lock
    assert not features(db("sqlite", transaction_mode="EXCLUSIVE")).begins_with_write_lock
    assert not features(db("sqlite")).begins_with_write_lock
    assert not features(db("sqlite")).isolation_above_read_committed
    assert features(postgresql).begins_with_write_lock
    assert not features(postgresql).isolation_above_read_committed
    assert features(db("postgresql", isolation_level=3)).isolation_above_read_committed
