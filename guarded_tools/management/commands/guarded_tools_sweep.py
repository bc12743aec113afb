"""Recover abandoned operations without a broker: once, or in a loop."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from guarded_tools.pipeline.recovery import close_old_connections, sweep


class Command(BaseCommand):
    help = (
        "Take over operations whose lease expired, run their tool's recover hook, and"
        " complete, release or mark them outcome_unknown. Also expires confirmations and"
        " purges completed operations past retention."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--once", action="store_true", help="Run one sweep (the default).")
        mode.add_argument("--loop", action="store_true", help="Sweep until interrupted.")
        parser.add_argument("--interval", type=float, default=30.0,
                            help="Seconds between sweeps with --loop (default 30).")
        parser.add_argument("--batch-size", type=int, default=None,
                            help="Operations per sweep (default: SWEEP_BATCH_SIZE).")

    def handle(self, *args: Any, **options: Any) -> None:
        while True:
            close_old_connections()
            try:
                report = sweep(batch_size=options["batch_size"],
                               every=options["interval"] if options["loop"] else None)
            except DatabaseError as exc:  # keep looping through a database restart
                self.stderr.write(f"sweep failed: {type(exc).__name__}")
                if not options["loop"]:
                    raise
            else:
                summary = " ".join(f"{k}={v}" for k, v in report.as_dict().items())
                self.stdout.write(f"sweep: {summary}")
                for line in report.errors:  # details are in the log, with tracebacks
                    self.stderr.write(f"sweep: recovery of operation {line}")
                if not options["loop"]:
                    if report.errors:
                        # A scheduler or monitor must see that some operations were not
                        # decided; they are retried once their lease expires.
                        raise CommandError(f"{len(report.errors)} operation(s) failed to recover.")
                    return
            time.sleep(options["interval"])
