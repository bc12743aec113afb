"""The app's migrations applied to rows that exist: forwards, backwards, forwards again."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

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


def test_check_and_migrate_warn_of_nothing_and_the_state_index_covers_where_it_can() -> None:
    """No ``models.W040`` on SQLite (Django's ``include=`` warned four times at every
    migrate); on PostgreSQL the index still carries ``created_at`` for the admin's
    index-only counts (tests/test_admin_scale.py), after 0009 is unapplied and reapplied."""
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
