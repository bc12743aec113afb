"""``python -m bench.recovery --ops N``: abandoned operations recovered per second.

Seeds N abandoned operations of the realistic tool (``bench_remote``: each has its
row, so its ``recover`` proves success), then runs one sweeper until none is left,
re-seeds, and runs two sweepers at once. Each sweeper is its own process calling
``guarded_tools.pipeline.recovery.sweep()`` in a loop, as a Celery worker or the management
command would; they start together on a barrier, after Django is set up, so
process start-up is not timed. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time
import uuid
from typing import Any

TOOL = "bench_remote"


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django

    django.setup()


def seed(n: int) -> None:
    """N abandoned operations (lease expired on the DB clock) and their effects."""
    from datetime import timedelta

    from django.contrib.auth.models import User
    from django.db import transaction
    from django.utils import timezone

    from bench.models import Item
    from guarded_tools.models import JournalEntry, Operation, OperationState
    from guarded_tools.store import fingerprint

    user = User.objects.get(username="bench")
    scope = f"{user._meta.label_lower}:{user.pk}"
    run = uuid.uuid4().hex[:8]
    past = timezone.now() - timedelta(minutes=5)
    with transaction.atomic():
        Operation.objects.filter(tool=TOOL).delete()
        for start in range(0, n, 2000):
            ops, items, journal = [], [], []
            for i in range(start, min(n, start + 2000)):
                key = f"rec-{run}-{i}"
                body = {"operationId": key, "value": i}
                op = Operation(tool=TOOL, scope=scope, key=key, fingerprint=fingerprint(body),
                               input=body, user=user, owner="dead", state=OperationState.IN_FLIGHT,
                               lease_expires_at=past)
                ops.append(op)
                items.append(Item(key=key, value=i, ref=f"r-{i}"))
                journal.append(JournalEntry(operation=op, data={"ref": f"r-{i}"}, fence=1))
            Operation.objects.bulk_create(ops)
            Item.objects.bulk_create(items)
            JournalEntry.objects.bulk_create(journal)


def remaining() -> int:
    from guarded_tools.models import Operation

    return Operation.objects.filter(tool=TOOL).abandoned().count()


def _sweeper(barrier: Any, results: Any, batch: int) -> None:
    _setup()
    from django.db import connection

    from guarded_tools.pipeline.recovery import sweep

    connection.ensure_connection()
    barrier.wait()
    started = time.perf_counter()
    stamp = time.time()
    taken = completed = 0
    while True:
        report = sweep(batch_size=batch)
        if not report.taken:
            break
        taken += report.taken
        completed += report.completed
    elapsed = time.perf_counter() - started
    results.put({"taken": taken, "completed": completed, "start": stamp,
                 "end": stamp + elapsed})



def run(sweepers: int, n: int, batch: int) -> dict[str, Any]:
    seed(n)
    from django.db import connections

    connections.close_all()
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(sweepers)
    results = ctx.Queue()
    procs = [ctx.Process(target=_sweeper, args=(barrier, results, batch))
             for _ in range(sweepers)]
    for p in procs:
        p.start()
    outs = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    wall = max(o["end"] for o in outs) - min(o["start"] for o in outs)
    completed = sum(o["completed"] for o in outs)
    left = remaining()
    return {
        "sweepers": sweepers,
        "operations": n,
        "completed": completed,
        "taken": sum(o["taken"] for o in outs),
        "left": left,
        "seconds": round(wall, 3),
        "per_second": round(completed / wall, 1) if wall else None,
        "per_sweeper": [o["completed"] for o in outs],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ops", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    _setup()
    runs: list[dict[str, Any]] = []
    for _ in range(args.rounds):  # interleaved: one, two, one, two, ...
        for sweepers in (1, 2):
            runs.append(run(sweepers, args.ops, args.batch))
    print(json.dumps({"runs": runs}))


if __name__ == "__main__":
    main()
