"""An export of 1,000,000 audit rows streams in constant memory, on PostgreSQL.

Measured through the admin's export URL: Python's allocations (``tracemalloc``) peak no
higher over the whole million than over its first 20,000 rows (ten keyset pages), and the
process's resident memory grows by no more than a few pages' worth. Compared, not bounded
absolutely: the measure is the same export, early and late.
"""

from __future__ import annotations

import resource
import tracemalloc
from typing import Any

import pytest
from django.db import connection

from guarded_tools.models import AuditEntry

pytestmark = [pytest.mark.django_db, pytest.mark.postgres, pytest.mark.slow]

ROWS = 1_000_000
EARLY = 20_000


def rss_kib() -> int:
    """This process's resident memory now (Linux ``/proc``), in KiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def test_a_million_audit_rows_export_in_constant_memory(user_factory: Any,
                                                        session_client_for: Any) -> None:
    table = AuditEntry._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (action, note, status, data, created_at)"
            " SELECT 'approve', 'approved payment ' || g, 'approved',"
            " jsonb_build_object('summary', 'Pay ' || g || '.00 to ACME', 'approvals', g %% 3),"
            " now() - make_interval(secs => g) FROM generate_series(1, %s) g", [ROWS])
    person = user_factory("exporter", is_staff=True, perms=(
        "guarded_tools.view_auditentry", "guarded_tools.export_records"))
    client = session_client_for(person)

    response = client.get("/admin/guarded_tools/auditentry/export.jsonl")
    assert response.status_code == 200 and response.streaming
    lines = size = 0
    early_peak = early_rss = 0
    rss_before = rss_kib()
    tracemalloc.start()
    try:
        for chunk in response.streaming_content:
            lines += chunk.count(b"\n")
            size += len(chunk)
            if not early_peak and lines >= EARLY:
                early_peak = tracemalloc.get_traced_memory()[1]
                early_rss = rss_kib()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    rss_after = rss_kib()
    print(f"\nexport of {lines:,} rows ({size / 2**20:.0f} MiB): tracemalloc peak"
          f" {early_peak / 2**20:.1f} MiB after {EARLY:,} rows, {peak / 2**20:.1f} MiB after"
          f" all; RSS {rss_before / 1024:.0f} MiB before, {early_rss / 1024:.0f} MiB after"
          f" {EARLY:,}, {rss_after / 1024:.0f} MiB after all")
    assert lines == ROWS
    assert peak <= early_peak * 1.25, (early_peak, peak)
    # The whole export is about 150 MiB of JSON: a buffered export would hold it all.
    assert rss_after - early_rss < 32 * 1024, (early_rss, rss_after)
    entry = AuditEntry.objects.get(action="export")
    assert entry.data["rows"] == ROWS
