"""Exports of the audit trail, operations and confirmations: what the list's filters show,
as CSV or JSON Lines, with a permission of their own, each export audited; keyset pages
(no OFFSET, no server-side cursor), streamed under WSGI and ASGI; the management command.

Through the admin, logged in through its own form (``session_client_for``)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from guarded_tools.models import AuditEntry, Confirmation, ConfirmationStatus, Operation

pytestmark = pytest.mark.django_db

AUDIT = "/admin/guarded_tools/auditentry/"
OPERATIONS = "/admin/guarded_tools/operation/"
CONFIRMATIONS = "/admin/guarded_tools/confirmation/"
EXPORT = "guarded_tools.export_records"


def body(response: Any) -> bytes:
    assert response.status_code == 200, response.status_code
    assert response.streaming
    return b"".join(response.streaming_content)


def jsonl(response: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in body(response).decode().splitlines()]


@pytest.fixture
def trail(alice: Any) -> list[AuditEntry]:
    return [AuditEntry.objects.create(actor=alice if i % 2 else None,
                                      action="approve" if i % 3 else "decline",
                                      note=f"entry {i}" if i != 4 else "=HYPERLINK(\"x\")")
            for i in range(12)]


@pytest.fixture
def exporter(user_factory: Any, session_client_for: Any) -> Any:
    return session_client_for(user_factory(
        "exporter", is_staff=True, perms=("guarded_tools.view_auditentry",
                                          "guarded_tools.view_operation",
                                          "guarded_tools.view_confirmation", EXPORT)))


@pytest.mark.usefixtures("trail")
def test_viewing_is_not_exporting(user_factory: Any, session_client_for: Any) -> None:
    viewer = session_client_for(user_factory("viewer", is_staff=True,
                                             perms=("guarded_tools.view_auditentry",)))
    page = viewer.get(AUDIT)
    assert page.status_code == 200 and "export.csv" not in page.content.decode()
    assert viewer.get(f"{AUDIT}export.csv").status_code == 403
    assert not AuditEntry.objects.filter(action="export").exists()


def test_the_export_is_what_the_filters_show_and_is_audited(
        trail: list[AuditEntry], exporter: Any, alice: Any) -> None:
    page = exporter.get(f"{AUDIT}?action__exact=approve")
    assert f'href="{AUDIT}export.csv?action__exact=approve"' in page.content.decode()
    assert f'href="{AUDIT}export.jsonl?action__exact=approve"' in page.content.decode()

    rows = jsonl(exporter.get(f"{AUDIT}export.jsonl?action__exact=approve&actor={alice.pk}"))
    expected = [e for e in reversed(trail) if e.action == "approve" and e.actor_id]
    assert [r["id"] for r in rows] == [e.pk for e in expected]  # newest first, as listed
    assert {r["actor"] for r in rows} == {"alice"}
    assert rows[0]["at"].endswith("Z")

    entry = AuditEntry.objects.get(action="export")
    assert entry.actor.username == "exporter"
    assert entry.data["filters"] == f"action__exact=approve&actor={alice.pk}"
    assert entry.data["rows"] == len(expected) and entry.data["format"] == "jsonl"


@pytest.mark.usefixtures("trail")
def test_csv_has_a_header_and_no_formula(exporter: Any) -> None:
    text = body(exporter.get(f"{AUDIT}export.csv?q=entry")).decode("utf-8-sig")
    table = list(csv.reader(io.StringIO(text)))
    assert table[0] == ["id", "at", "actor", "action", "status", "operation", "confirmation",
                        "note", "data"]
    assert len(table) == 1 + 11  # the search for "entry" leaves out the formula's row
    everything = list(csv.reader(io.StringIO(
        body(exporter.get(f"{AUDIT}export.csv")).decode("utf-8-sig"))))
    notes = [row[7] for row in everything[1:]]
    assert "'=HYPERLINK(\"x\")" in notes  # shown as text, never run as a formula


def test_operations_and_confirmations_export_their_filters(exporter: Any, alice: Any) -> None:
    for i in range(5):
        Operation.objects.create(tool="pay" if i < 3 else "refund", scope="s", key=f"k{i}",
                                 input={"amount": i})
    for i, status in enumerate([ConfirmationStatus.PENDING, ConfirmationStatus.PENDING,
                                ConfirmationStatus.DECLINED]):
        Confirmation.objects.create(tool="pay", scope="s", key=f"c{i}", fingerprint="f",
                                    input={}, status=status)
    ops = jsonl(exporter.get(f"{OPERATIONS}export.jsonl?tool=pay"))
    assert sorted(r["key"] for r in ops) == ["k0", "k1", "k2"]
    assert {r["input"]["amount"] for r in ops} == {0, 1, 2}
    waiting = jsonl(exporter.get(f"{CONFIRMATIONS}export.jsonl"))  # the queue: pending
    assert sorted(r["key"] for r in waiting) == ["c0", "c1"]
    every = jsonl(exporter.get(f"{CONFIRMATIONS}export.jsonl?status__exact=all"))
    assert len(every) == 3
    assert AuditEntry.objects.filter(action="export").count() == 3


@pytest.mark.usefixtures("trail")
def test_keyset_pages_never_offset_nor_declare_a_cursor(exporter: Any, settings: Any) -> None:
    settings.GUARDED_TOOLS = {"EXPORT_PAGE_SIZE": 5}
    response = exporter.get(f"{AUDIT}export.jsonl")
    with CaptureQueriesContext(connection) as queries:
        rows = jsonl(response)
    assert len(rows) == 12
    reads = [q["sql"] for q in queries.captured_queries
             if 'FROM "guarded_tools_auditentry"' in q["sql"] and "SELECT" in q["sql"]]
    assert len(reads) == 3  # 5 + 5 + 2
    assert all("LIMIT 5" in sql and "OFFSET" not in sql for sql in reads), reads
    assert not any("DECLARE" in q["sql"].upper() for q in queries.captured_queries)


def test_under_asgi_the_export_streams_asynchronously(
        trail: list[AuditEntry], user_factory: Any) -> None:
    import warnings

    from asgiref.sync import async_to_sync
    from django.test import AsyncClient

    person = user_factory("async-exporter", is_staff=True,
                          perms=("guarded_tools.view_auditentry", EXPORT))
    client = AsyncClient()

    async def export() -> tuple[Any, list[bytes]]:
        await client.aforce_login(person)
        response = await client.get(f"{AUDIT}export.jsonl")
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # Django warns when it must read a sync iterator
            return response, [chunk async for chunk in response.streaming_content]

    response, chunks = async_to_sync(export)()
    assert response.status_code == 200 and response.is_async
    rows = [json.loads(line) for line in b"".join(chunks).decode().splitlines()]
    assert [r["id"] for r in rows] == [e.pk for e in reversed(trail)]


def test_the_command_exports_to_a_file_on_a_schedule(trail: list[AuditEntry],
                                                     tmp_path: Any) -> None:
    target = tmp_path / "audit-%Y.csv"
    call_command("guarded_tools_export", "audit", "--filter", "action__exact=decline",
                 "--format", "csv", "--output", str(target))
    (written,) = list(tmp_path.iterdir())
    table = list(csv.reader(io.StringIO(written.read_text("utf-8-sig"))))
    assert len(table) == 1 + sum(e.action == "decline" for e in trail)
    entry = AuditEntry.objects.get(action="export")
    assert entry.actor is None and entry.data["via"] == "command"
    assert entry.data["rows"] == len(table) - 1


def test_the_command_as_a_user_needs_the_permission(trail: list[AuditEntry],
                                                    user_factory: Any) -> None:
    user_factory("nobody-special")
    with pytest.raises(CommandError, match="may not export"):
        call_command("guarded_tools_export", "audit", "--user", "nobody-special")
    with pytest.raises(CommandError, match="not the list's"):
        call_command("guarded_tools_export", "audit", "--filter", "nonsense__field=1")


def test_the_command_exports_operations_and_confirmations_as_their_lists_filter(
        tmp_path: Any) -> None:
    for i, tool in enumerate(("pay", "pay", "refund")):
        Operation.objects.create(tool=tool, scope="s", key=f"k{i}", input={"amount": i})
    Confirmation.objects.create(tool="pay", scope="s", key="c0", fingerprint="f", input={})
    Confirmation.objects.create(tool="pay", scope="s", key="c1", fingerprint="f", input={},
                                status=ConfirmationStatus.DECLINED)
    call_command("guarded_tools_export", "operations", "--filter", "tool=pay",
                 "--output", str(tmp_path / "operations.jsonl"))
    call_command("guarded_tools_export", "confirmations", "--format", "csv",
                 "--output", str(tmp_path / "confirmations.csv"))  # the queue: pending
    lines = (tmp_path / "operations.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["key"] for line in lines) == ["k0", "k1"]
    table = list(csv.reader(io.StringIO((tmp_path / "confirmations.csv").read_text("utf-8-sig"))))
    assert [row[3] for row in table[1:]] == ["c0"]
