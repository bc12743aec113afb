"""Server-side prepared statements for the store's statements (PostgreSQL, psycopg 3).

What goes on the wire is read from libpq's trace; what the session holds from
``pg_prepared_statements``. A pooler that hands the connection another session
(PgBouncer in transaction mode) is simulated by dropping or planting statements in
the session behind the store's back.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.db import DEFAULT_DB_ALIAS, connection, connections

from bench.statements import server_prepared
from guarded_tools.models import JournalEntry, Operation, OperationState
from tests.conftest import on_the_wire, one_transaction

pytestmark = pytest.mark.django_db(transaction=True)  # real BEGIN/COMMIT, as in production

SCHEMA = {
    "type": "object",
    "properties": {"operationId": {"type": "string"}, "name": {"type": "string"}},
    "required": ["operationId", "name"],
}


@pytest.fixture(autouse=True)
def postgresql_with_psycopg3(request: pytest.FixtureRequest) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("server-side prepared statements are PostgreSQL's")
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    if not is_psycopg3:
        pytest.skip("the store sends them with psycopg 3's client-side binding")
    request.getfixturevalue("sessions_probed")


def effect(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"id": Group.objects.create(name=input["name"]).pk}


counter = iter(range(10**6))


def body() -> dict[str, Any]:
    n = next(counter)
    return {"operationId": f"op-{n}", "name": f"group-{n}"}


@pytest.fixture
def tools(make_tool: Any, settings: Any) -> dict[str, Any]:
    one_transaction(settings, True)
    return {
        "atomic": make_tool(effect, input_schema=SCHEMA, atomic=True),
        "claimed": make_tool(effect, input_schema=SCHEMA),
    }


@pytest.fixture
def post(client_for: Any, alice: Any) -> Any:
    client = client_for(alice)

    def post(definition: Any, data: dict[str, Any] | None = None) -> list[str]:
        def run() -> None:
            response = client.post(f"/agent/tools/{definition.name}/", data or body(),
                                   format="json")
            assert response.status_code == 200, response.content

        return on_the_wire(run)

    return post


def statements(sent: list[str]) -> list[str]:
    return [part for query in sent for part in query.split("; ")]


def session_prepared() -> set[str]:
    return set(server_prepared(connection))


def test_statements_are_prepared_once_per_session_then_executed(tools: Any, post: Any) -> None:
    first = statements(post(tools["atomic"]))
    prepared = [part for part in first if part.startswith("PREPARE ")]
    # The lock, the read and, along with them, the INSERTs of the operation and of a
    # journal entry that end the transaction.
    assert len(prepared) == 4, first
    assert {p.split()[1] for p in prepared} <= session_prepared()

    second = post(tools["atomic"])
    assert len(second) == 3, second
    assert not any("PREPARE " in query for query in second), second
    assert second[0].startswith("BEGIN; EXECUTE gt_"), second
    assert second[2].startswith("EXECUTE gt_") and second[2].endswith("; COMMIT"), second
    assert Group.objects.count() == 2
    assert set(Operation.objects.values_list("state", flat=True)) == {OperationState.SUCCEEDED}


def test_a_tool_that_claims_first_executes_its_claim_and_completion(tools: Any,
                                                                     post: Any) -> None:
    post(tools["claimed"])
    sent = post(tools["claimed"])
    # The claim, the effect (the ORM's own INSERT), the completion.
    assert len(sent) == 3, sent
    assert sent[0].startswith("EXECUTE gt_") and sent[2].startswith("EXECUTE gt_"), sent
    assert "auth_group" in sent[1]
    assert Operation.objects.filter(state=OperationState.SUCCEEDED).count() == 2


@pytest.mark.parametrize("kind", ["atomic", "claimed"])
def test_statements_missing_from_the_session_are_sent_again_plain(
        kind: str, tools: Any, post: Any, caplog: Any) -> None:
    post(tools[kind])
    with connection.cursor() as cursor:  # another session, as a pooler would hand over
        cursor.execute("DEALLOCATE ALL")
    with caplog.at_level(logging.WARNING, logger="guarded_tools.store"):
        sent = post(tools[kind])
    assert "PREPARED_STATEMENTS" in caplog.text
    assert sent[0].removeprefix("BEGIN; ").startswith("EXECUTE gt_"), sent  # failed: 26000
    retried = 2 if kind == "atomic" else 1  # the ROLLBACK of the BEGIN it sent, and again
    assert not any("EXECUTE" in query for query in sent[retried:]), sent
    assert Group.objects.count() == 2  # each effect once
    assert not any("EXECUTE" in query for query in post(tools[kind]))  # plain from now on


def test_a_session_that_already_holds_them_is_not_prepared_twice(tools: Any, post: Any,
                                                                 caplog: Any) -> None:
    first = statements(post(tools["atomic"]))
    prepares = [part for part in first if part.startswith("PREPARE ")]
    connection.close()  # a new connection: the store expects a session with nothing...
    with connection.cursor() as cursor:  # ...and the pooler hands it one that has them
        for prepare in prepares:
            cursor.execute(prepare)
    with caplog.at_level(logging.WARNING, logger="guarded_tools.store"):
        sent = post(tools["atomic"])
    assert "PREPARE " in sent[0], sent  # failed: 42P05, the statement exists
    assert not any("PREPARE " in query or "EXECUTE" in query for query in sent[2:]), sent
    assert "PREPARED_STATEMENTS" in caplog.text
    assert Group.objects.count() == 2


def test_the_setting_turns_them_off(tools: Any, post: Any, settings: Any) -> None:
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "PREPARED_STATEMENTS": False}
    for _ in range(2):
        for definition in tools.values():
            sent = post(definition)
            assert not any("PREPARE " in q or "EXECUTE " in q for q in sent), sent
    assert not session_prepared()


def test_a_transaction_pooling_configuration_turns_them_off(tools: Any, post: Any) -> None:
    from guarded_tools.store import _Statements

    wrapper = connections[DEFAULT_DB_ALIAS]
    wrapper.settings_dict["DISABLE_SERVER_SIDE_CURSORS"] = True
    wrapper.__dict__.pop(_Statements.ATTRIBUTE, None)  # read when first used
    try:
        for _ in range(2):
            sent = post(tools["atomic"]) + post(tools["claimed"])
            assert not any("PREPARE " in q or "EXECUTE " in q for q in sent), sent
    finally:
        wrapper.settings_dict["DISABLE_SERVER_SIDE_CURSORS"] = False
        wrapper.__dict__.pop(_Statements.ATTRIBUTE, None)


def test_a_connection_to_no_server_session_never_prepares(
    tools: Any, post: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A pooler (PgBouncer) reports a process id of its own, no server's: found by the
    process's first probe, before anything is prepared, so nothing fails on the server."""
    from guarded_tools import store

    monkeypatch.setattr(store, "_DIRECT", set())  # this process has not probed yet...
    monkeypatch.setattr(store, "_SWITCHED", set())
    monkeypatch.setattr(store, "_PROBE", "SELECT pg_backend_pid() + 1")  # ...behind a pooler
    caplog.set_level(logging.INFO, logger="guarded_tools.store")
    for _ in range(2):
        sent = post(tools["atomic"]) + post(tools["claimed"])
        assert not any("PREPARE " in q or "EXECUTE " in q for q in sent), sent
    assert not session_prepared()
    assert "DISABLE_SERVER_SIDE_CURSORS" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_permission_query_is_prepared_with_the_lock(make_tool: Any, post: Any,
                                                      settings: Any, alice: Any) -> None:
    from django.contrib.auth.models import Permission

    one_transaction(settings, True)
    alice.user_permissions.add(Permission.objects.get(codename="add_group"))
    guarded = make_tool(effect, input_schema=SCHEMA, atomic=True,
                        permissions=("auth.add_group",))
    post(guarded)
    sent = post(guarded)
    assert len(sent) == 3, sent
    assert "auth_user_user_permissions" not in sent[0], sent  # executed, not sent again
    assert statements(sent)[:4] == [part for part in statements(sent)[:4]
                                    if part == "BEGIN" or part.startswith("EXECUTE gt_")]


def test_a_journal_entry_is_inserted_prepared_with_the_operation(make_tool: Any, post: Any,
                                                                settings: Any) -> None:
    one_transaction(settings, True)

    def journaled(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.operation.write({"step": "insert"})
        return effect(input, ctx)

    definition = make_tool(journaled, input_schema=SCHEMA, atomic=True)
    post(definition)
    last = statements(post(definition)[-1:])
    assert len(last) == 3 and last[-1] == "COMMIT", last
    assert all(part.startswith("EXECUTE gt_") for part in last[:2]), last

    assert JournalEntry.objects.filter(data={"step": "insert"}).count() == 2


def test_a_completion_inside_a_transaction_is_never_sent_on_trust(make_tool: Any, tools: Any,
                                                                  post: Any,
                                                                  settings: Any) -> None:
    post(tools["claimed"])  # the claim and the completion, prepared in autocommit
    with connection.cursor() as cursor:  # this session lost the completion, not the claim
        cursor.execute("SELECT name FROM pg_prepared_statements WHERE statement LIKE %s",
                       ['%UPDATE "guarded_tools_operation" SET "state"%'])
        (name,) = cursor.fetchone()
        cursor.execute(f"DEALLOCATE {name}")
    # Claim first, then the effect and the completion in one transaction: a missing
    # statement there could not be sent again, so the completion goes plain.
    one_transaction(settings, False)
    claim_first = make_tool(effect, input_schema=SCHEMA, atomic=True)
    sent = post(claim_first)
    assert sent[0].startswith("EXECUTE gt_"), sent  # the claim, in autocommit
    assert any(q.startswith('UPDATE "guarded_tools_operation"') for q in statements(sent)), sent
    assert Operation.objects.filter(tool=claim_first.name,
                                    state=OperationState.SUCCEEDED).exists()



@pytest.fixture(autouse=True)
def consistent_sessions(postgresql_with_psycopg3: None) -> Any:
    """After each test, no session holds statements the store does not know of, and the
    process prepares again (a test may have shown it a switched session)."""
    yield
    from guarded_tools import store

    if connection.connection is not None:
        with connection.cursor() as cursor:
            cursor.execute("DEALLOCATE ALL")
    store._SESSIONS.clear()
    store._SWITCHED.clear()


def test_a_pooled_connection_keeps_its_statements(tools: Any, post: Any) -> None:
    wrapper = connections[DEFAULT_DB_ALIAS]
    post(tools["atomic"])
    first = wrapper.connection
    other = wrapper.get_new_connection(wrapper.get_connection_params())
    other.autocommit = True
    try:
        wrapper.connection = other  # a pool hands out another connection...
        assert any("PREPARE " in q for q in post(tools["atomic"]))
        wrapper.connection = first  # ...then the first one again: it still has them
        sent = post(tools["atomic"])
        assert len(sent) == 3 and not any("PREPARE " in q for q in sent), sent
        assert sent[0].startswith("BEGIN; EXECUTE gt_"), sent
    finally:
        wrapper.connection = first
        other.close()
    assert Group.objects.count() == 3


def test_a_statement_lost_mid_transaction_fails_the_call_and_commits_nothing(
        make_tool: Any, client_for: Any, alice: Any, settings: Any, caplog: Any) -> None:
    one_transaction(settings, True)

    def loses_the_insert(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        output = effect(input, ctx)
        if input["name"] != "lose":
            return output
        with connection.cursor() as cursor:  # the session changes under the transaction
            cursor.execute("SELECT name, statement FROM pg_prepared_statements")
            for name, statement in cursor.fetchall():
                if f'PREPARE {name} AS INSERT INTO "guarded_tools_operation"' in statement:
                    cursor.execute(f"DEALLOCATE {name}")
        return output

    definition = make_tool(loses_the_insert, input_schema=SCHEMA, atomic=True)
    client = client_for(alice)
    client.post(f"/agent/tools/{definition.name}/", body(), format="json")  # prepares
    assert Operation.objects.count() == 1
    response = client.post(f"/agent/tools/{definition.name}/", {**body(), "name": "lose"},
                           format="json")
    # The INSERT cannot be sent again: the effect is in the same transaction, so the
    # call fails whole rather than commit an operation without its effect.
    assert response.status_code == 500, response.content
    assert Group.objects.count() == 1 and Operation.objects.count() == 1


def test_a_failing_round_trip_that_only_executed_keeps_the_statements(
        make_tool: Any, post: Any, client_for: Any, alice: Any, settings: Any) -> None:
    one_transaction(settings, True)

    def answers(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        output = effect(input, ctx)
        return {**output, "note": "\x00" if input.get("note") == "nul" else ""}

    definition = make_tool(answers, input_schema=SCHEMA, atomic=True)
    post(definition)
    # jsonb refuses a NUL character: the operation's INSERT fails, in a round trip
    # that prepared nothing.
    response = client_for(alice).post(f"/agent/tools/{definition.name}/",
                                      {**body(), "note": "nul"}, format="json")
    assert response.status_code == 500, response.content
    sent = post(definition)
    assert sent[0].startswith("BEGIN; EXECUTE gt_") and "PREPARE " not in sent[0], sent


def test_a_literal_percent_sign_survives_preparing() -> None:
    from guarded_tools.store import _Statements

    statements = _Statements.of(connection)
    sql = "SELECT %s::text || '%%'"
    with connection.cursor() as cursor:
        first = statements.send(cursor, [(sql, ["a"])], rows=True, prepare=(sql,))
        again = statements.send(cursor, [(sql, ["b"])], rows=True, prepare=(sql,))
    assert (first, again) == ([[("a%",)]], [[("b%",)]])
    assert statements.executed
