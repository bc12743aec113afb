"""The app's migrations applied to rows that exist: forwards, backwards, forwards again."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from guarded_tools.models import Confirmation, Operation

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("guarded_tools", "0009_state_index_carries_created_at")]
AFTER = [("guarded_tools", "0010_stored_summary_requester_label_reconciled")]


@pytest.fixture(autouse=True)
def back_to_the_latest() -> Iterator[None]:
    """Each test leaves the app's tables as every later test expects them: all migrations
    applied. (Left at 0010, a later test in the same xdist worker met a schema without
    0011-0013's tables and columns.)"""
    yield
    call_command("migrate", "guarded_tools", verbosity=0, stdout=StringIO())


def migrate(targets: list[tuple[str, str]]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor


def test_0010_backfills_finality_and_requesters_from_what_was_recorded() -> None:
    apps = migrate(BEFORE).loader.project_state(BEFORE).apps
    old_operation = apps.get_model("guarded_tools", "Operation")
    old_confirmation = apps.get_model("guarded_tools", "Confirmation")
    audit = apps.get_model("guarded_tools", "AuditEntry")

    def operation(key: str) -> uuid.UUID:
        return old_operation.objects.create(tool="t", scope="auth.user:1", key=key,
                                            fingerprint="f", state="succeeded").pk

    decided, ran = operation("decided"), operation("ran")
    audit.objects.create(action="mark_succeeded", operation_id=decided, status="succeeded")
    audit.objects.create(action="recover", operation_id=ran, status="succeeded")
    for scope in ("principal:billing-bot", "myapp.tokenuser:7", "anonymous"):
        old_confirmation.objects.create(tool="t", scope=scope, key=scope, fingerprint="f",
                                        input={"amount": "1.00"})
    migrate(AFTER)
    assert set(Operation.objects.filter(reconciled=True).values_list("pk", flat=True)) == {
        decided}
    assert dict(Confirmation.objects.values_list("scope", "requested_by_label")) == {
        "principal:billing-bot": "billing-bot", "myapp.tokenuser:7": "myapp.tokenuser:7",
        "anonymous": "anonymous"}
    assert set(Confirmation.objects.values_list("summary", flat=True)) == {""}
    migrate(BEFORE)  # and back: the columns go, the rows stay
    with connection.cursor() as cursor:
        columns = {c.name for c in connection.introspection.get_table_description(
            cursor, Operation._meta.db_table)}
    assert "reconciled" not in columns and "recovered" in columns
    assert old_operation.objects.count() == 2
    migrate(AFTER)
    assert Operation.objects.filter(reconciled=True).count() == 1


def state_index() -> str:
    """How the database holds ``gt_operation_state_updated``: its columns, and on
    PostgreSQL its definition (``INCLUDE`` is not in Django's introspection)."""
    with connection.cursor() as cursor:
        found = connection.introspection.get_constraints(cursor, Operation._meta.db_table)
        columns = found["gt_operation_state_updated"]["columns"]
        if connection.vendor != "postgresql":
            return " ".join(columns)
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s",
                       ["gt_operation_state_updated"])
        return str(cursor.fetchone()[0])


@pytest.mark.sqlite  # the state index differs by database
def test_check_and_migrate_warn_of_nothing_and_the_state_index_covers_where_it_can() -> None:
    """No ``models.W040`` on SQLite (Django's ``include=`` warned four times at every
    migrate); on PostgreSQL the index still carries ``created_at`` for the admin's
    index-only counts (tests/console/test_admin_scale.py), after 0009 is unapplied and reapplied."""
    err = StringIO()
    call_command("check", "--database", "default", stdout=StringIO(), stderr=err)
    migrate([("guarded_tools", "0008_audit_actions_withdraw_and_recover")])
    call_command("migrate", "guarded_tools", skip_checks=False, verbosity=0,
                 stdout=StringIO(), stderr=err)
    assert "W040" not in err.getvalue() and "warning" not in err.getvalue().lower(), \
        err.getvalue()
    index = state_index()
    if connection.vendor == "postgresql":
        assert "(state, updated_at) INCLUDE (created_at)" in index, index
    else:
        assert index == "state updated_at"


def test_0016_backfills_the_history_of_operations_made_before_it(admin_client: Any) -> None:
    """An operation made before the history existed gets its timeline from its own rows,
    in the order it happened, marked as recorded on upgrade; one with events gets none."""
    before = [("guarded_tools", "0015_audit_recoveries_index")]
    apps = migrate(before).loader.project_state(before).apps
    old_operation = apps.get_model("guarded_tools", "Operation")
    journal = apps.get_model("guarded_tools", "JournalEntry")
    audit = apps.get_model("guarded_tools", "AuditEntry")
    event = apps.get_model("guarded_tools", "OperationEvent")
    user = apps.get_model("auth", "User").objects.create(username="old-agent")
    now = timezone.now()
    ran = old_operation.objects.create(
        tool="t", scope="auth.user:1", key="ran", fingerprint="f", state="succeeded",
        user=user, fence=2, completed_at=now, output={"ok": True})
    journal.objects.create(operation_id=ran.pk, data={"reference": "r-1"}, fence=1)
    audit.objects.create(action="recover", operation_id=ran.pk, status="succeeded")
    recorded = old_operation.objects.create(tool="t", scope="auth.user:1", key="recorded",
                                            fingerprint="f", state="succeeded")
    event.objects.create(operation_id=recorded.pk, kind="claimed", at=now)

    migrate([("guarded_tools", "0016_backfill_operation_events")])
    from guarded_tools.models import OperationEvent

    rows = list(OperationEvent.objects.filter(operation_id=ran.pk).order_by("id"))
    assert [r.kind for r in rows] == ["claimed", "journal", "recovered", "succeeded"], rows
    assert rows[0].actor == "agent old-agent" and rows[1].details["data"] == {"reference": "r-1"}
    assert rows[2].actor == "sweep" and rows[2].details["outcome"] == "succeeded"
    assert all(r.details["backfilled"] for r in rows)
    assert OperationEvent.objects.filter(operation_id=recorded.pk).count() == 1
    call_command("migrate", "guarded_tools", verbosity=0, stdout=StringIO())  # the page's
    page = admin_client.get(f"/admin/guarded_tools/operation/{ran.pk}/change/")
    assert page.status_code == 200
    assert page.content.decode().count("recorded on upgrade") == 4


def test_0017_backfills_why_released_rows_are_released() -> None:
    """A released row from before 0017 reads the reason its rows show: the request it waits
    on (or its decline), a person's "mark not executed", recovery's proof; else none."""
    before = [("guarded_tools", "0016_backfill_operation_events")]
    apps = migrate(before).loader.project_state(before).apps
    old_operation = apps.get_model("guarded_tools", "Operation")
    old_confirmation = apps.get_model("guarded_tools", "Confirmation")
    audit = apps.get_model("guarded_tools", "AuditEntry")

    def released(key: str, state: str = "released") -> uuid.UUID:
        return old_operation.objects.create(tool="t", scope="auth.user:1", key=key,
                                            fingerprint="f", state=state).pk

    def asked(operation: uuid.UUID, status: str) -> None:
        old_confirmation.objects.create(tool="t", scope="auth.user:1", key=str(operation),
                                        fingerprint=f"f-{status}", input={},
                                        operation_id=operation, status=status)

    waiting, declined, marked = released("waiting"), released("declined"), released("marked")
    recovered, ran = released("recovered"), released("ran", "succeeded")
    released("unknown")  # released, with nothing to say why
    asked(waiting, "pending")
    asked(declined, "declined")
    audit.objects.create(action="mark_not_executed", operation_id=marked, status="released")
    audit.objects.create(action="recover", operation_id=recovered, status="released")
    asked(ran, "consumed")
    migrate([("guarded_tools", "0017_operation_release_reason")])
    assert dict(Operation.objects.values_list("key", "release_reason")) == {
        "waiting": "waiting_for_approval", "declined": "declined", "marked": "not_executed",
        "recovered": "failed_before_effect", "unknown": "", "ran": ""}
