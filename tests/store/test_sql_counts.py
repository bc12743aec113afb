"""SQL statements per guarded REST call: what each kind of call costs the database.

Counted through the real REST call (DRF, the pipeline, the store), authenticated
without a token lookup so that only the guard's and the effect's statements are
seen. Transaction control is counted apart: ``data`` (SELECT, INSERT, UPDATE, …)
and ``control`` (BEGIN, COMMIT, SAVEPOINT, …). Where the store sends several
statements in one execute (PostgreSQL), each is counted, and so is each round trip.
Runs on SQLite and, with DATABASE_URL, on PostgreSQL, for the three ways a call runs:
a tool that is not atomic, an atomic one whose claim commits first, and an atomic one
in one transaction (the default for atomic tools).

- a validation failure issues no statement;
- a replay this process has seen issues none; another replay at most 2 data
  statements (the claim attempt or the key's lock, and a read);
- an in-flight duplicate at most 2 data statements;
- a fresh call at most 2 writes beyond the effect: the claim and the completion, or,
  in one transaction, the operation's INSERT alone.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import django
import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import include, path
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from bench.floor import floor_call, floor_claimed_call, keyed_features_floor, keyed_mcp_floor
from bench.statements import CONTROL, round_trips, server_prepared, statements
from guarded_tools.models import Operation, OperationState
from guarded_tools.pipeline import principal_scope
from guarded_tools.store import OperationStore, fingerprint
from guarded_tools.store.replays import replays
from tests.conftest import on_the_wire, one_transaction

# real BEGIN/COMMIT, as in production; the counts differ by database, SQLite's are checked too
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sqlite]

SCHEMA = {
    "type": "object",
    "properties": {"operationId": {"type": "string"}, "name": {"type": "string"}},
    "required": ["operationId", "name"],
    "additionalProperties": False,
}
EFFECT_TABLE = "auth_group"


def effect(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """The tool's effect: exactly one INSERT."""
    group = Group.objects.create(name=input["name"])
    return {"id": group.pk}


class Counted:
    def __init__(self, queries: list[dict[str, Any]]) -> None:
        # What reached the server (test_a_fresh_call_is_four_round_trips_on_the_wire
        # checks the wire itself), and its statements: those sent together count one each.
        self.round_trips = round_trips(queries)
        self.sql = statements(self.round_trips, server_prepared(connection))
        self.control = [s for s in self.sql if s.split(None, 1)[0].upper() in CONTROL]
        self.data = [s for s in self.sql if s not in self.control]
        self.effect = [s for s in self.data if EFFECT_TABLE in s]
        self.writes = [s for s in self.data
                       if s.split(None, 1)[0].upper() in ("INSERT", "UPDATE", "DELETE", "WITH")]

    @property
    def writes_beyond_effect(self) -> list[str]:
        return [s for s in self.writes if s not in self.effect]

    def __repr__(self) -> str:
        return "\n".join(self.round_trips)


def call(client: Any, name: str, body: dict[str, Any], status: int) -> Counted:
    with CaptureQueriesContext(connection) as ctx:
        response = client.post(f"/agent/tools/{name}/", body, format="json")
    assert response.status_code == status, response.content
    return Counted(ctx.captured_queries)


def body() -> dict[str, Any]:
    return {"operationId": uuid.uuid4().hex, "name": f"g-{uuid.uuid4().hex[:12]}"}


PATHS = ["not-atomic", "atomic-claim-first", "atomic-one-transaction"]


@pytest.fixture(params=PATHS)
def definition(request: pytest.FixtureRequest, make_tool: Any, settings: Any) -> Any:
    one_transaction(settings, request.param == "atomic-one-transaction")
    return make_tool(effect, input_schema=SCHEMA, atomic=request.param != "not-atomic")


def in_one_transaction(definition: Any) -> bool:
    from guarded_tools.conf import gt_settings

    return bool(definition.atomic and gt_settings.ATOMIC_SINGLE_TRANSACTION)


@pytest.fixture
def client(client_for: Any, alice: Any) -> Any:
    return client_for(alice)


def test_a_validation_failure_issues_no_statement(definition: Any, client: Any) -> None:
    counted = call(client, definition.name, {"operationId": "k", "name": 42}, 422)
    assert counted.sql == [], counted


def test_a_fresh_call_writes_at_most_twice_beyond_its_effect(definition: Any,
                                                             client: Any) -> None:
    counted = call(client, definition.name, body(), 200)
    assert len(counted.effect) == 1, counted
    assert Operation.objects.get(tool=definition.name).state == OperationState.SUCCEEDED
    # Issue 28: one more INSERT per call, the operation's history (its claim and its
    # outcome, batched in one statement with the completion's event), what the console's
    # timeline reads.
    if not definition.atomic and connection.vendor == "postgresql":
        # claim (autocommit), effect, then the completion with its history in one
        # statement (a data-modifying WITH), one round trip on every Django version
        assert len(counted.writes_beyond_effect) == 2 and len(counted.data) == 3, counted
        assert counted.writes_beyond_effect[-1].startswith("WITH done AS (UPDATE"), counted
        assert counted.control == [] and len(counted.round_trips) == 3, counted
    elif not definition.atomic:  # claim (autocommit), effect, completion, history
        assert len(counted.writes_beyond_effect) == 3 and len(counted.data) == 4, counted
        # Django 5.2's bulk_create wraps its INSERT (the history's) in a transaction of its
        # own in autocommit; Django 6.0's sends a single INSERT without one.
        assert counted.control == [] or (
            django.VERSION < (6,) and len(counted.control) == 2
            and counted.control[-1] == "COMMIT"), counted
    elif not in_one_transaction(definition):  # claim, then effect + completion together
        # (PostgreSQL: the completion with its history in one statement, as above)
        writes = 2 if connection.vendor == "postgresql" else 3
        assert len(counted.writes_beyond_effect) == writes, counted
        assert len(counted.data) == writes + 1, counted
        assert len(counted.control) == 2, counted  # BEGIN, COMMIT
    else:  # the key's lock and a read, the effect, the operation's INSERT, its history
        assert len(counted.writes_beyond_effect) == 2, counted
        reads = 2 if connection.vendor == "postgresql" else 1  # the lock, then the read
        assert len(counted.data) == reads + 3, counted
        if connection.vendor == "postgresql":
            # psycopg's BEGIN; the lock and the read in one round trip; the effect; the
            # operation's INSERT and its history's, in one round trip; Django's COMMIT
            # (issue 26: the store sends no transaction statement).
            assert len(counted.round_trips) == 5, counted
            assert counted.round_trips[0] == "BEGIN", counted
            assert counted.round_trips[-1] == "COMMIT", counted


def shapes(sent: list[str]) -> list[str]:
    """Round trips as statements without their values (literals, numbers, casts)."""
    return [re.sub(r"\s+", " ", re.sub(r"-?\b\d+\b", "?",
                                       re.sub(r"'(?:[^']|'')*'(::\w+)?", "?", sql)))
            for sql in sent]


def floor_beside(guarded: Counted, run_floor: Any, user: Any, tool: str,
                 kinds: list[str]) -> Operation:
    """Run a bench floor (``run_floor(tool=, scope=, key=, user=, input=, effect=)``, the
    effect this module's) for a fresh key: it must send what the guarded call ``guarded``
    sent, round trip for round trip, and leave the operation and history it would."""
    data = body()
    with CaptureQueriesContext(connection) as ctx:
        output = run_floor(tool=tool, scope=principal_scope(user, None),
                           key=data["operationId"], user=user, input=data,
                           effect=lambda: effect(data, None))
    floor = Counted(ctx.captured_queries)
    assert shapes(floor.round_trips) == shapes(guarded.round_trips), (floor, guarded)
    operation = Operation.objects.get(key=data["operationId"])
    assert operation.state == OperationState.SUCCEEDED and operation.output == output
    assert [e.kind for e in operation.events.all()] == kinds
    return operation


def test_the_benchs_floor_sends_what_an_atomic_fresh_call_sends(make_tool: Any, client: Any,
                                                                alice: Any,
                                                                settings: Any) -> None:
    """The bench's floor (F, ``bench.floor``) stands for what the guard's statements cost a
    fresh call: it must send them all, and nothing else."""
    one_transaction(settings, True)
    definition = make_tool(effect, input_schema=SCHEMA, atomic=True)
    guarded = call(client, definition.name, body(), 200)
    floor_beside(guarded, floor_call, alice, definition.name, ["claimed", "succeeded"])


def test_the_benchs_full_floor_sends_what_a_fully_guarded_call_sends(
    make_tool: Any, client_for: Any, user_factory: Any, settings: Any,
) -> None:
    """F-D: F with D's permission query (the site's backend, as the guard asks it) and one
    journal entry, beside a guarded call that has both."""
    one_transaction(settings, True)

    def journaled(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.operation.write({"step": "insert"})
        return effect(input, ctx)

    carol = user_factory("carol", perms=("auth.add_group",))
    definition = make_tool(journaled, input_schema=SCHEMA, atomic=True,
                           permissions=("auth.add_group",))
    guarded = call(client_for(carol), definition.name, body(), 200)
    carol = type(carol).objects.get(pk=carol.pk)  # as a request's user: no permission cache

    def full_floor(**kwargs: Any) -> Any:
        assert carol.has_perms(("auth.add_group",))
        return floor_call(**kwargs, journal=[{"step": "insert"}])

    operation = floor_beside(guarded, full_floor, carol, definition.name,
                             ["claimed", "journal", "succeeded"])
    assert [e.data for e in operation.journal.all()] == [{"step": "insert"}]


def test_the_benchs_claim_first_floor_sends_what_a_fresh_call_sends(make_tool: Any,
                                                                    client: Any, alice: Any,
                                                                    ) -> None:
    """F-R (``bench.floor.floor_claimed_call``): a tool that is not atomic, its claim and its
    completion with the history (PostgreSQL's statements)."""
    if connection.vendor != "postgresql":
        pytest.skip("the claim-first floor sends PostgreSQL's statements")
    definition = make_tool(effect, input_schema=SCHEMA)
    guarded = call(client, definition.name, body(), 200)
    floor_beside(guarded, floor_claimed_call, alice, definition.name, ["claimed", "succeeded"])


#: F-K is served under the MCP endpoint's path, as ``bench.urls`` serves it
#: (``@pytest.mark.urls(__name__)``).
urlpatterns = [path("agent/mcp/floor/", keyed_mcp_floor),
               path("agent/mcp/floor/features/", keyed_features_floor),
               path("agent/", include("guarded_tools.urls"))]
ECHOED = {"type": "object", "properties": {"value": {"type": "integer"}},
          "required": ["value"]}


@pytest.mark.urls(__name__)
def test_the_benchs_keyed_mcp_floor_sends_what_a_keyed_mcp_call_sends(make_tool: Any,
                                                                      alice: Any) -> None:
    """F-K (``bench.floor.keyed_mcp_floor``): the keyed ``tools/call`` over MCP with the
    caller's DRF token, as the peer table's keyed call (``echo_keyed``: not atomic): the
    token's query, the claim and the completion with its history, and the same answer."""
    if connection.vendor != "postgresql":
        pytest.skip("the keyed MCP floor sends PostgreSQL's statements")
    schema = {"type": "object", "required": ["operationId", "value"],
              "properties": {"operationId": {"type": "string"}, "value": {"type": "integer"}}}
    definition = make_tool(lambda input, ctx: {"value": input["value"]}, input_schema=schema,
                           output_schema=ECHOED)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=alice).key}")

    def post(where: str, key: str) -> tuple[Counted, dict[str, Any]]:
        message = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": definition.name, "arguments": {"operationId": key, "value": 7}}}
        with CaptureQueriesContext(connection) as ctx:
            response = client.post(where, message, format="json",
                                   HTTP_ACCEPT="application/json, text/event-stream",
                                   HTTP_MCP_PROTOCOL_VERSION="2025-11-25")
        assert response.status_code == 200, response.content
        assert response.json()["id"] == 7, response.content
        return Counted(ctx.captured_queries), response.json()["result"]

    guarded, answer = post("/agent/mcp/", uuid.uuid4().hex)
    key = uuid.uuid4().hex
    floor, floor_answer = post("/agent/mcp/floor/", key)
    # the token's SELECT, the claim (its own commit), the completion with its history
    assert len(guarded.round_trips) == 3 and "authtoken_token" in guarded.round_trips[0], guarded
    assert shapes(floor.round_trips) == shapes(guarded.round_trips), (floor, guarded)
    # the answer bench/mcp.lua checks, in the same shape
    assert floor_answer["structuredContent"] == answer["structuredContent"] == {"value": 7}
    assert [json.loads(c["text"]) for c in floor_answer["content"]] == [{"value": 7}]
    assert [json.loads(c["text"]) for c in answer["content"]] == [{"value": 7}]
    assert set(floor_answer) == set(answer) and set(floor_answer["_meta"]) == set(answer["_meta"])
    summary = next(iter(floor_answer["_meta"].values()))
    assert set(summary) == set(next(iter(answer["_meta"].values())))
    operation = Operation.objects.get(key=key)
    assert summary == {"id": str(operation.pk), "key": key, "status": "succeeded",
                       "replayed": False, "recovered": False}
    assert operation.state == OperationState.SUCCEEDED and operation.output == {"value": 7}
    assert operation.user == alice and operation.tool == definition.name
    assert [e.kind for e in operation.events.all()] == ["claimed", "succeeded"]


@pytest.mark.urls(__name__)
def test_the_benchs_keyed_features_floor_does_what_a_keyed_mcp_call_does(make_tool: Any,
                                                                         alice: Any) -> None:
    """F-K+ (``bench.floor.keyed_features_floor``, what ``bench.frame`` measures the guard's
    frame against): F-K's statements, and the keyed call's answer, fingerprint, replay
    cache entry and history, so that the app replays a key F-K+ ran; an input its schema
    refuses is refused before any write."""
    if connection.vendor != "postgresql":
        pytest.skip("the keyed MCP floors send PostgreSQL's statements")
    schema = {"type": "object", "required": ["operationId", "value"],
              "additionalProperties": False,
              "properties": {"operationId": {"type": "string"}, "value": {"type": "integer"}}}
    definition = make_tool(lambda input, ctx: {"value": input["value"]}, input_schema=schema,
                           output_schema=ECHOED)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=alice).key}")

    def post(where: str, arguments: dict[str, Any]) -> tuple[Counted, bytes]:
        message = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                   "params": {"name": definition.name, "arguments": arguments}}
        with CaptureQueriesContext(connection) as ctx:
            response = client.post(where, message, format="json",
                                   HTTP_ACCEPT="application/json, text/event-stream",
                                   HTTP_MCP_PROTOCOL_VERSION="2025-11-25")
        assert response.status_code == 200, response.content
        return Counted(ctx.captured_queries), response.content

    app_key, key = uuid.uuid4().hex, uuid.uuid4().hex
    guarded, answer = post("/agent/mcp/", {"operationId": app_key, "value": 7})
    floor, floor_answer = post("/agent/mcp/floor/features/", {"operationId": key, "value": 7})
    assert shapes(floor.round_trips) == shapes(guarded.round_trips), (floor, guarded)
    # the same bytes, but for the operation's id and key
    app_row, row = Operation.objects.get(key=app_key), Operation.objects.get(key=key)
    assert floor_answer.replace(str(row.pk).encode(), b"ID").replace(key.encode(), b"KEY") == \
        answer.replace(str(app_row.pk).encode(), b"ID").replace(app_key.encode(), b"KEY")
    assert row.fingerprint == fingerprint({"operationId": key, "value": 7})
    assert (row.state, row.output, row.user, row.tool) == (
        OperationState.SUCCEEDED, {"value": 7}, alice, definition.name)
    assert [e.kind for e in row.events.all()] == ["claimed", "succeeded"]
    # its key is the app's to replay: from the replay cache, with no statement but the token's
    remembered = replays.get(definition.name, principal_scope(alice, None), key)
    assert remembered is not None and remembered.fingerprint == row.fingerprint
    replayed, again = post("/agent/mcp/", {"operationId": key, "value": 7})
    assert json.loads(again)["result"]["_meta"] == {
        **json.loads(floor_answer)["result"]["_meta"],
        next(iter(json.loads(floor_answer)["result"]["_meta"])): {
            **next(iter(json.loads(floor_answer)["result"]["_meta"].values())), "replayed": True}}
    assert len(replayed.round_trips) == 1, replayed
    # an input the schema refuses: the app's refusal, before any write
    bad = {"operationId": uuid.uuid4().hex, "value": "7"}
    refused, refusal = post("/agent/mcp/floor/features/", bad)
    _, app_refusal = post("/agent/mcp/", bad)
    assert json.loads(refusal)["result"]["isError"] is True
    assert json.loads(refusal) == json.loads(app_refusal)
    assert len(refused.round_trips) == 1 and not Operation.objects.filter(key=bad["operationId"])


def psycopg3_postgresql() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's round trips")
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    if not is_psycopg3:
        pytest.skip("psycopg 3's round trips")


def test_a_fresh_call_is_four_round_trips_on_the_wire(make_tool: Any, client: Any,
                                                      settings: Any) -> None:
    psycopg3_postgresql()
    one_transaction(settings, True)
    definition = make_tool(effect, input_schema=SCHEMA, atomic=True)

    def run() -> None:
        assert client.post(f"/agent/tools/{definition.name}/", body(),
                           format="json").status_code == 200

    sent = on_the_wire(run)
    # psycopg's own BEGIN; the lock with the read; the effect; the INSERT with the
    # history's INSERT (issue 28) in one round trip; Django's COMMIT (issue 26: the store
    # never ends the transaction Django opened).
    assert len(sent) == 5, sent
    assert sent[0] == "BEGIN", sent
    assert sent[1].startswith("SELECT pg_try_advisory_xact_lock"), sent
    assert "auth_group" in sent[2] and sent[3].startswith("INSERT"), sent
    assert "; INSERT INTO \"guarded_tools_operationevent\"" in sent[3], sent
    assert sent[4] == "COMMIT", sent
    # The transaction ended; the driver is back to Django's autocommit.
    assert connection.connection.info.transaction_status.name == "IDLE"
    assert connection.connection.autocommit and connection.get_autocommit()


def test_an_atomic_handler_runs_in_the_transaction_psycopg_began(make_tool: Any, client: Any,
                                                                 settings: Any) -> None:
    """The store leaves the driver's autocommit to Django: inside the handler psycopg is in
    a transaction it began itself, as in any ``atomic()`` block (so, for one, a
    ``.iterator()`` there opens its cursor without ``WITH HOLD``)."""
    psycopg3_postgresql()
    one_transaction(settings, True)
    seen: dict[str, Any] = {}

    def looks(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        seen["autocommit"] = connection.connection.autocommit
        seen["status"] = connection.connection.info.transaction_status.name
        return effect(input, ctx)

    definition = make_tool(looks, input_schema=SCHEMA, atomic=True)
    response = client.post(f"/agent/tools/{definition.name}/", body(), format="json")
    assert response.status_code == 200, response.content
    assert seen == {"autocommit": False, "status": "INTRANS"}


@pytest.mark.parametrize("atomic", [True, False], ids=["atomic", "claimed"])
def test_the_store_prepares_nothing_in_the_session(atomic: bool, make_tool: Any, client: Any,
                                                   settings: Any) -> None:
    """No statement of the store's outlives its call in the session: nothing for a
    pooler that switches sessions (PgBouncer in transaction mode) or resets them
    (``DISCARD ALL``) to break."""
    psycopg3_postgresql()
    one_transaction(settings, True)
    definition = make_tool(effect, input_schema=SCHEMA, atomic=atomic)
    for _ in range(7):  # past PostgreSQL's five custom plans, were anything prepared
        response = client.post(f"/agent/tools/{definition.name}/", body(), format="json")
        assert response.status_code == 200, response.content
    assert server_prepared(connection) == {}
    assert Group.objects.count() == 7


def test_a_failing_handler_rolls_back_the_transaction_begun_with_the_lock(
        make_tool: Any, client: Any, settings: Any) -> None:
    one_transaction(settings, True)

    def fails(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        effect(input, ctx)
        raise RuntimeError("after the effect")

    failing = make_tool(fails, input_schema=SCHEMA, atomic=True)
    response = client.post(f"/agent/tools/{failing.name}/", body(), format="json")
    assert response.status_code == 500, response.content
    assert not Group.objects.exists() and not Operation.objects.exists()
    assert connection.get_autocommit() and not connection.in_atomic_block
    if connection.vendor == "postgresql":
        assert connection.connection.info.transaction_status.name == "IDLE"
        assert connection.connection.autocommit
    # The connection goes on as before: a call that succeeds commits its effect.
    working = make_tool(effect, input_schema=SCHEMA, atomic=True)
    assert client.post(f"/agent/tools/{working.name}/", body(), format="json").status_code == 200
    assert Group.objects.count() == 1 and Operation.objects.get().tool == working.name


def test_a_replay_issues_at_most_two_statements(definition: Any, client: Any) -> None:
    data = body()
    call(client, definition.name, data, 200)
    assert call(client, definition.name, data, 200).sql == []  # seen by this process
    replays.clear()
    counted = call(client, definition.name, data, 200)  # as another process would
    assert len(counted.data) <= 2 and counted.effect == [], counted
    if in_one_transaction(definition):  # the lock is taken in a transaction: it ends
        assert len(counted.control) == 2, counted
    else:
        assert counted.control == [], counted
    assert Group.objects.count() == 1


def test_an_in_flight_duplicate_issues_at_most_two_statements(definition: Any, client: Any,
                                                              alice: Any) -> None:
    data = body()
    live = OperationStore().claim(tool=definition.name, scope=principal_scope(alice, None) or "",
                                  key=data["operationId"], fp=fingerprint(data), input=data,
                                  user=alice, lease_seconds=60)
    counted = call(client, definition.name, data, 409)
    assert len(counted.data) <= 2, counted  # the claim attempt (or the lock) and a read
    assert counted.effect == [], counted
    assert len(counted.control) == (2 if in_one_transaction(definition) else 0), counted
    row = Operation.objects.get(pk=live.operation.pk)
    assert (row.state, row.owner, row.fence) == (OperationState.IN_FLIGHT, live.owner, 1)
    assert Group.objects.count() == 0


def test_a_reused_key_with_another_input_issues_at_most_two_statements(definition: Any,
                                                                       client: Any) -> None:
    data = body()
    call(client, definition.name, data, 200)
    assert call(client, definition.name, {**data, "name": "other"}, 422).sql == []
    replays.clear()
    counted = call(client, definition.name, {**data, "name": "other"}, 422)
    assert len(counted.data) <= 2 and counted.effect == [], counted


@pytest.mark.parametrize("path", PATHS)
def test_a_replay_of_a_verified_tool_reads_what_one_without_a_verifier_reads(
        path: str, make_tool: Any, client: Any, settings: Any, user_factory: Any,
        alice: Any) -> None:
    """Whether a person decided the result (then ``verify`` does not judge it) is on the
    row the replay reads: no statement of its own, reconciled or not."""
    from guarded_tools.pipeline.reconciliation import mark_succeeded

    one_transaction(settings, path == "atomic-one-transaction")
    judged: list[Any] = []

    def verify(**kwargs: Any) -> bool:
        judged.append(kwargs["output"])
        return True

    counts = {}
    for name, options in (("plain", {}), ("verified", {"verify": verify})):
        definition = make_tool(effect, input_schema=SCHEMA, atomic=path != "not-atomic",
                               **options)
        data = body()
        call(client, definition.name, data, 200)
        replays.clear()  # as another process would replay it
        counts[name] = call(client, definition.name, data, 200)
    assert len(counts["verified"].sql) == len(counts["plain"].sql), counts
    assert len(judged) == 2  # the call and its replay: not reconciled, so judged
    # A replay of what a person decided: the same statements, and never judged.
    operation = Operation.objects.create(
        tool=definition.name, scope=principal_scope(alice, None) or "", user=alice,
        key=uuid.uuid4().hex, fingerprint="", state=OperationState.OUTCOME_UNKNOWN, owner="")
    data = {"operationId": operation.key, "name": "decided"}
    Operation.objects.filter(pk=operation.pk).update(fingerprint=fingerprint(data), input=data)
    mark_succeeded(operation, user_factory("ops", is_superuser=True), {"id": 7}, "checked",
                   fence=operation.fence)
    decided = call(client, definition.name, data, 200)
    assert len(decided.sql) == len(counts["plain"].sql), decided
    assert len(judged) == 2


@pytest.mark.parametrize("path", ["atomic-claim-first", "atomic-one-transaction"])
def test_a_journal_write_is_one_statement_on_postgresql(path: str, make_tool: Any, client: Any,
                                                        settings: Any) -> None:
    one_transaction(settings, path == "atomic-one-transaction")

    def journaled(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.operation.write({"step": "before the effect"})
        return effect(input, ctx)

    definition = make_tool(journaled, input_schema=SCHEMA, atomic=True)
    counted = call(client, definition.name, body(), 200)
    journal = [s for s in counted.data if "guarded_tools_journalentry" in s]
    assert len(journal) == 1, counted
    # Issue 28: the history's INSERTs (one with the completion; on the claim-first path
    # one more with the journal write, so that a crash after it keeps its event).
    if path == "atomic-one-transaction":
        # Kept in memory, inserted with the operation: no statement of its own.
        assert len(counted.data) == (6 if connection.vendor == "postgresql" else 5), counted
        # PostgreSQL: the lock with the read, the operation with its journal and its
        # history (Django sends its own COMMIT since issue 26).
        assert len(counted.round_trips) == (
            len(counted.sql) - 3 if connection.vendor == "postgresql" else len(counted.sql))
    elif connection.vendor == "postgresql":  # the completion carries its history
        assert counted.control == ["BEGIN", "COMMIT"], counted
        assert len(counted.data) == 5, counted
    else:  # the compare-and-set and the entry, in a savepoint of the effect's transaction
        assert len(counted.data) == 7, counted
