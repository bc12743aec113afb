"""The app's migrations applied to rows that exist: forwards, backwards, forwards again."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from guarded_tools.models import Confirmation, Operation

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("guarded_tools", "0009_state_index_carries_created_at")]
AFTER = [("guarded_tools", "0010_stored_summary_requester_label_reconciled")]


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
