"""SQL statements per guarded REST call: what each kind of call costs the database.

Counted through the real REST call (DRF, the pipeline, the store), authenticated
without a token lookup so that only the guard's and the effect's statements are
seen. Every statement is a round trip, transaction control included, so both are
counted: ``data`` (SELECT, INSERT, UPDATE, …) and ``control`` (BEGIN, COMMIT,
SAVEPOINT, …). Runs on SQLite and, with DATABASE_URL, on PostgreSQL.

- a validation failure issues no statement;
- a replay issues at most 2 (the claim attempt, which inserts nothing, and a read);
- an in-flight duplicate at most 2 (the same two);
- a fresh call at most 2 writes beyond the effect (the claim and the completion), and
  the claim is one statement in autocommit, never a transaction of its own.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.test.utils import CaptureQueriesContext

from guarded_tools.models import Operation, OperationState
from guarded_tools.pipeline import principal_scope
from guarded_tools.store import OperationStore, fingerprint

pytestmark = pytest.mark.django_db(transaction=True)  # real BEGIN/COMMIT, as in production

SCHEMA = {
    "type": "object",
    "properties": {"operationId": {"type": "string"}, "name": {"type": "string"}},
    "required": ["operationId", "name"],
    "additionalProperties": False,
}
CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")
EFFECT_TABLE = "auth_group"


def effect(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """The tool's effect: exactly one INSERT."""
    group = Group.objects.create(name=input["name"])
    return {"id": group.pk}


class Counted:
    def __init__(self, queries: list[dict[str, Any]]) -> None:
        self.sql = [q["sql"] for q in queries]
        self.control = [s for s in self.sql if s.split(None, 1)[0].upper() in CONTROL]
        self.data = [s for s in self.sql if s not in self.control]
        self.effect = [s for s in self.data if EFFECT_TABLE in s]
        self.writes = [s for s in self.data
                       if s.split(None, 1)[0].upper() in ("INSERT", "UPDATE", "DELETE", "WITH")]

    @property
    def writes_beyond_effect(self) -> list[str]:
        return [s for s in self.writes if s not in self.effect]

    def __repr__(self) -> str:
        return "\n".join(self.sql)


def call(client: Any, name: str, body: dict[str, Any], status: int) -> Counted:
    with CaptureQueriesContext(connection) as ctx:
        response = client.post(f"/agent/tools/{name}/", body, format="json")
    assert response.status_code == status, response.content
    return Counted(ctx.captured_queries)


def body() -> dict[str, Any]:
    return {"operationId": uuid.uuid4().hex, "name": f"g-{uuid.uuid4().hex[:12]}"}


@pytest.fixture(params=[True, False], ids=["atomic", "not-atomic"])
def definition(request: pytest.FixtureRequest, make_tool: Any) -> Any:
    return make_tool(effect, input_schema=SCHEMA, atomic=request.param)


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
    assert len(counted.writes_beyond_effect) <= 2, counted  # the claim, the completion
    assert len(counted.data) == 3, counted  # and no read besides
    # Transaction control: atomic tools wrap effect + completion (BEGIN, COMMIT); the
    # claim is one autocommit statement, never a transaction of its own.
    assert len(counted.control) == (2 if definition.atomic else 0), counted
    assert Operation.objects.get(tool=definition.name).state == OperationState.SUCCEEDED


def test_a_replay_issues_at_most_two_statements(definition: Any, client: Any) -> None:
    data = body()
    call(client, definition.name, data, 200)
    counted = call(client, definition.name, data, 200)
    assert len(counted.sql) <= 2, counted
    assert counted.control == [] and counted.effect == [], counted
    assert Group.objects.count() == 1


def test_an_in_flight_duplicate_issues_at_most_two_statements(definition: Any, client: Any,
                                                              alice: Any) -> None:
    data = body()
    live = OperationStore().claim(tool=definition.name, scope=principal_scope(alice, None) or "",
                                  key=data["operationId"], fp=fingerprint(data), input=data,
                                  user=alice, lease_seconds=60)
    counted = call(client, definition.name, data, 409)
    assert len(counted.sql) <= 2, counted  # the claim attempt (it inserts nothing) and a read
    assert counted.control == [] and counted.effect == [], counted
    row = Operation.objects.get(pk=live.operation.pk)
    assert (row.state, row.owner, row.fence) == (OperationState.IN_FLIGHT, live.owner, 1)
    assert Group.objects.count() == 0


def test_a_reused_key_with_another_input_issues_at_most_two_statements(definition: Any,
                                                                       client: Any) -> None:
    data = body()
    call(client, definition.name, data, 200)
    counted = call(client, definition.name, {**data, "name": "other"}, 422)
    assert len(counted.sql) <= 2 and counted.effect == [], counted


def test_a_journal_write_is_one_statement_on_postgresql(make_tool: Any, client: Any) -> None:
    def journaled(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.operation.write({"step": "before the effect"})
        return effect(input, ctx)

    definition = make_tool(journaled, input_schema=SCHEMA, atomic=True)
    counted = call(client, definition.name, body(), 200)
    journal = [s for s in counted.data if "guarded_tools_journalentry" in s]
    if connection.vendor == "postgresql":
        assert len(journal) == 1 and counted.control == ["BEGIN", "COMMIT"], counted
        assert len(counted.data) == 4, counted
    else:  # the compare-and-set and the entry, in a savepoint of the effect's transaction
        assert len(journal) == 1 and len(counted.data) == 5, counted
