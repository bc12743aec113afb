"""The guarantees every deployment keeps, run once per matrix row (scripts/matrix.sh).

Through the public surface only: HTTP with a token and with a real session login
(CSRF enforced), real threads on their own connections, the sweep's management
command. A row is a settings module (``tests/matrix/settings_*.py``) and the
services the script starts for it; the first test checks that the row really runs
what it says, the last that the server and the app logged no failure meanwhile.
"""

from __future__ import annotations

import io
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, Permission
from django.core.management import call_command
from django.db import connection, connections, transaction
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from guarded_tools.core.errors import ToolError
from guarded_tools.models import Operation, OperationState
from tests.conftest import in_threads, key, wait_until
from tests.matrix import backends
from tests.matrix.conftest import APP_WARNINGS, server_errors

pytestmark = pytest.mark.django_db(transaction=True)  # real commits, seen by every thread

SCHEMA = {
    "type": "object",
    "properties": {"operationId": {"type": "string"}, "name": {"type": "string"}},
    "required": ["operationId", "name"],
}
ADD_GROUP = "auth.add_group"
THREADS = 16


def url(definition: Any) -> str:
    return f"/agent/tools/{definition.name}/"


def body() -> dict[str, str]:
    return {"operationId": key(), "name": f"g-{uuid.uuid4().hex[:12]}"}


class Effect:
    """A handler whose effect is a row (a group named in the input), counted across threads."""

    def __init__(self, after: Callable[[dict[str, Any], Any], None] | None = None) -> None:
        self.lock = threading.Lock()
        self.runs = 0
        self.after = after

    def __call__(self, input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        with self.lock:
            self.runs += 1
        group = Group.objects.create(name=input["name"])
        if self.after is not None:
            self.after(input, ctx)
        return {"group": group.pk}


def token_client(user: Any) -> APIClient:
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture(params=["token", "session"])
def transport(request: pytest.FixtureRequest, session_client_for: Any) -> Callable[[Any], Any]:
    """A signed-in caller: a token's, or a browser session's with CSRF enforced."""
    if request.param == "token":
        return token_client
    return session_client_for  # type: ignore[no-any-return]


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """``fn()`` started in a thread of its own (its own connection); its result or exception."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:
            out.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


# -- the row is what it says ----------------------------------------------------------------
def test_the_row_runs_the_configuration_it_names(matrix_row: str, user_factory: Any) -> None:
    import django

    config = connection.settings_dict
    options = config.get("OPTIONS") or {}
    assert django.VERSION[:2] >= (5, 2)
    user = user_factory()
    if matrix_row == "uuid-users":
        assert isinstance(user.pk, uuid.UUID)
    else:
        assert isinstance(user.pk, int)
    if matrix_row.startswith("pool"):
        assert connection.pool is not None  # type: ignore[attr-defined]
    if matrix_row == "two-backends":
        assert len(settings.AUTHENTICATION_BACKENDS) == 2
    if matrix_row == "atomic-requests":
        assert config["ATOMIC_REQUESTS"] is True
    if matrix_row == "server-side-binding":
        assert options["server_side_binding"] is True
    # Atomic tools run as one transaction (key lock, effect, operation) except above READ
    # COMMITTED, where they claim first: the threaded tests exercise the path the row has.
    from guarded_tools.store import OperationStore

    one_transaction = matrix_row not in ("repeatable-read", "serializable")
    assert OperationStore().can_lock() == one_transaction
    if connection.vendor != "postgresql":
        return
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    with connection.cursor() as cursor:
        cursor.execute("SELECT inet_server_port(), current_setting('port')")
        reached, server = cursor.fetchone()
    # Through PgBouncer the client's port is the pooler's, not the server's.
    through_pooler = str(config["PORT"]) != str(server)
    assert through_pooler == matrix_row.startswith("pgbouncer"), (config["PORT"], reached, server)
    if matrix_row.startswith("pgbouncer"):
        assert bool(config.get("DISABLE_SERVER_SIDE_CURSORS")) == (matrix_row == "pgbouncer")
    import os

    assert is_psycopg3 == (os.environ.get("GT_MATRIX_DRIVER", "psycopg") == "psycopg")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SHOW transaction_isolation")
        isolation = cursor.fetchone()[0]
    expected = {"repeatable-read": "repeatable read", "serializable": "serializable"}
    assert isolation == expected.get(matrix_row, "read committed")


# -- a fresh call, its replay, permissions ------------------------------------------------------
@pytest.mark.parametrize("atomic", [False, True], ids=["claimed", "atomic"])
def test_a_fresh_call_runs_once_and_its_replay_answers_the_same(
    atomic: bool, transport: Any, make_tool: Any, user_factory: Any
) -> None:
    effect = Effect()
    definition = make_tool(effect, input_schema=SCHEMA, atomic=atomic)
    user = user_factory()
    client = transport(user)
    data = body()
    first = client.post(url(definition), data, format="json")
    assert first.status_code == 200, first.content
    again = client.post(url(definition), data, format="json")
    assert again.status_code == 200, again.content
    assert again["Idempotent-Replayed"] == "true"
    assert again.json()["output"] == first.json()["output"]
    assert effect.runs == 1 and Group.objects.filter(name=data["name"]).count() == 1
    operation = Operation.objects.get(tool=definition.name)
    assert operation.state == OperationState.SUCCEEDED
    assert operation.user_id == user.pk


@pytest.mark.parametrize("atomic", [False, True], ids=["claimed", "atomic"])
def test_a_permissioned_tool_runs_for_a_holder_and_refuses_anyone_else(
    atomic: bool, transport: Any, make_tool: Any, user_factory: Any
) -> None:
    effect = Effect()
    definition = make_tool(effect, input_schema=SCHEMA, atomic=atomic, permissions=[ADD_GROUP])
    refused = transport(user_factory()).post(url(definition), body(), format="json")
    assert refused.status_code == 403, refused.content
    assert refused.json()["error"]["code"] == "authorization_denied"
    allowed = transport(user_factory(perms=(ADD_GROUP,))).post(url(definition), body(),
                                                                 format="json")
    assert allowed.status_code == 200, allowed.content
    assert effect.runs == 1


def test_a_permission_a_second_backend_grants_is_honoured(
    matrix_row: str, transport: Any, make_tool: Any, user_factory: Any
) -> None:
    if matrix_row != "two-backends":
        pytest.skip("the second backend is installed in the two-backends row")
    effect = Effect()
    definition = make_tool(effect, input_schema=SCHEMA, atomic=True, permissions=[ADD_GROUP])
    grantee = user_factory(first_name=backends.GRANTEE)
    assert not Permission.objects.filter(user=grantee).exists()  # ModelBackend grants nothing
    allowed = transport(grantee).post(url(definition), body(), format="json")
    assert allowed.status_code == 200, allowed.content
    assert effect.runs == 1


# -- one key, many callers ---------------------------------------------------------------------
@pytest.mark.parametrize("atomic", [False, True], ids=["claimed", "atomic"])
def test_one_key_from_sixteen_threads_runs_once(
    atomic: bool, make_tool: Any, user_factory: Any
) -> None:
    effect = Effect()
    definition = make_tool(effect, input_schema=SCHEMA, atomic=atomic, permissions=[ADD_GROUP])
    user = user_factory(perms=(ADD_GROUP,))
    token_client(user)  # the token exists before the threads start
    data = body()

    def call(_i: int) -> tuple[int, str]:
        response = token_client(user).post(url(definition), data, format="json")
        return response.status_code, response.content.decode()

    answers = in_threads(THREADS, call)
    assert effect.runs == 1, answers
    assert Group.objects.filter(name=data["name"]).count() == 1
    assert all(status in (200, 409) for status, _ in answers), answers
    assert any(status == 200 for status, _ in answers), answers
    # Everyone who asks afterwards gets the one result.
    after = token_client(user).post(url(definition), data, format="json")
    assert after.status_code == 200 and after["Idempotent-Replayed"] == "true", after.content


def test_a_duplicate_that_began_before_the_original_committed_runs_nothing(
    make_tool: Any, user_factory: Any
) -> None:
    """The duplicate's transaction starts (its snapshot taken) while the original runs, and
    reaches the key only after the original committed: it must see the original's row.

    The duplicate is held between the two by a lock queued on the permission table its
    first statement reads; every wait is for a condition, seen in ``pg_stat_activity``.
    """
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's snapshots and locks")
    entered, release = threading.Event(), threading.Event()

    def hold(input: dict[str, Any], ctx: Any) -> None:
        entered.set()
        assert release.wait(30)

    effect = Effect(after=hold)
    definition = make_tool(effect, input_schema=SCHEMA, atomic=True, permissions=[ADD_GROUP])
    user = user_factory(perms=(ADD_GROUP,))
    token_client(user)
    data = body()
    table = user._meta.get_field("user_permissions").remote_field.through._meta.db_table

    def post() -> Any:
        return token_client(user).post(url(definition), data, format="json")

    def lock_table() -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f'LOCK TABLE "{table}" IN ACCESS EXCLUSIVE MODE')

    def waiting(like: str, negate: bool = False) -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
                f" AND query {'NOT ' if negate else ''}LIKE %s", [like])
            return bool(cursor.fetchone()[0])

    original, first = in_thread(post)
    try:
        assert entered.wait(30)
        locker, _ = in_thread(lock_table)  # queued behind the original, if it reads the table
        wait_until(lambda: not locker.is_alive() or waiting("LOCK TABLE%"), timeout=30)
        duplicate, second = in_thread(post)  # its first statement queues behind the LOCK
        wait_until(lambda: not duplicate.is_alive() or waiting("LOCK TABLE%", negate=True),
                   timeout=30)
    finally:
        release.set()
    for thread in (original, locker, duplicate):
        thread.join(30)
        assert not thread.is_alive()
    [first_response], [second_response] = first, second
    assert first_response.status_code == 200, first_response.content
    assert second_response.status_code in (200, 409), second_response.content
    assert effect.runs == 1
    assert Group.objects.filter(name=data["name"]).count() == 1


# -- atomic tools, journals, the sweep ----------------------------------------------------------
def test_an_atomic_tool_that_fails_leaves_no_effect_and_its_key_fresh(
    transport: Any, make_tool: Any, user_factory: Any
) -> None:
    fail = [True]

    def then_fail(input: dict[str, Any], ctx: Any) -> None:
        if fail[0]:
            raise ToolError("upstream_refused", "The upstream refused.", retry="as_is")

    effect = Effect(after=then_fail)
    definition = make_tool(effect, input_schema=SCHEMA, atomic=True)
    client = transport(user_factory())
    data = body()
    refused = client.post(url(definition), data, format="json")
    assert refused.status_code == 409, refused.content
    assert refused.json()["error"]["code"] == "upstream_refused"
    assert not Group.objects.filter(name=data["name"]).exists()  # rolled back with the call
    fail[0] = False
    retried = client.post(url(definition), data, format="json")
    assert retried.status_code == 200, retried.content
    assert effect.runs == 2 and Group.objects.filter(name=data["name"]).count() == 1


def test_a_handler_that_raises_after_its_journaled_effect_is_never_run_again(
    transport: Any, make_tool: Any, user_factory: Any
) -> None:
    def journal_then_crash(input: dict[str, Any], ctx: Any) -> None:
        ctx.operation.write({"sent": input["name"]})
        raise RuntimeError("connection reset after the upstream accepted")

    effect = Effect(after=journal_then_crash)
    definition = make_tool(effect, input_schema=SCHEMA, journal=True)
    client = transport(user_factory())
    data = body()
    first = client.post(url(definition), data, format="json")
    assert first.status_code >= 500 and first.json()["error"]["code"] == "outcome_unknown"
    assert "connection reset" not in first.content.decode()  # no internal text to the agent
    again = client.post(url(definition), data, format="json")
    assert again.json()["error"]["code"] == "outcome_unknown", again.content
    assert effect.runs == 1
    assert Operation.objects.get(tool=definition.name).state == OperationState.OUTCOME_UNKNOWN


def test_the_sweep_recovers_an_operation_whose_owner_stalled(
    make_tool: Any, user_factory: Any
) -> None:
    entered, release = threading.Event(), threading.Event()

    def stall(input: dict[str, Any], ctx: Any) -> None:
        ctx.operation.write({"group": input["name"]})
        entered.set()
        assert release.wait(30)

    def recover(*, input: dict[str, Any], operation: Any, **_: Any) -> dict[str, Any]:
        group = Group.objects.filter(name=input["name"]).first()
        if group is None:
            return {"recovered": False}
        return {"recovered": True, "output": {"group": group.pk}}

    effect = Effect(after=stall)
    definition = make_tool(effect, input_schema=SCHEMA, journal=True, recover=recover,
                           lease_seconds=1)
    user = user_factory()
    client = token_client(user)
    data = body()
    owner, out = in_thread(lambda: token_client(user).post(url(definition), data,
                                                           format="json"))
    try:
        assert entered.wait(30)
        operation = Operation.objects.get(tool=definition.name)
        wait_until(lambda: Operation.objects.abandoned().filter(pk=operation.pk).exists())
        report = io.StringIO()
        call_command("guarded_tools_sweep", "--once", stdout=report)
    finally:
        release.set()
    owner.join(30)
    assert not owner.is_alive()
    assert "taken=1 completed=1" in report.getvalue(), report.getvalue()
    [stalled] = out  # the stalled owner lost its lease: it answers what recovery decided
    assert stalled.status_code == 200, stalled.content
    assert stalled.json()["operation"]["recovered"] is True
    operation.refresh_from_db()
    assert operation.state == OperationState.SUCCEEDED and operation.recovered
    replay = client.post(url(definition), data, format="json")
    assert replay.status_code == 200, replay.content
    assert replay.json()["operation"]["recovered"] is True
    assert effect.runs == 1


# -- nothing failed on the way -------------------------------------------------------------------
def test_zz_nothing_failed_on_the_server_or_in_the_app_meanwhile() -> None:
    """Last: no statement failed on the server and the app warned of nothing (a pooler's
    switched sessions, a statement sent again) while the row's guarantees ran."""
    errors = server_errors()
    assert not errors, "\n".join(errors[:20])
    warned = [f"{r.name}: {r.getMessage()}" for r in APP_WARNINGS.records
              if r.name.startswith("guarded_tools.store")]
    assert not warned, warned
