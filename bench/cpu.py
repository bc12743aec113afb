"""Provides CPU accounting for the load runs: whose CPU one request costs.

On a machine where the server, the database and the load generator share the cores,
throughput is the cores divided by the CPU one request costs everyone. ``CpuMeter``
reads ``/proc`` (Linux) before and after a run: the CPU time of the app server's
process tree, of the database server's process tree, and the busy time of the whole
machine. Divided by the requests served, that says how much of a guarded call's extra
cost is the app's Python and how much is the database's work. Elsewhere (no
``/proc``) it measures nothing and the figures are left out.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")


def _ticks() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, ValueError, OSError):
        return 100.0


class CpuMeter:
    """CPU seconds of named process trees and of the whole machine, from ``/proc``."""

    def __init__(self, roots: dict[str, int | None]) -> None:
        self.roots = {name: pid for name, pid in roots.items() if pid}
        self.hz = _ticks()
        self.available = (PROC / "stat").exists()

    def _processes(self) -> dict[int, tuple[int, float]]:
        """pid -> (parent pid, CPU seconds used so far) for every process."""
        found: dict[int, tuple[int, float]] = {}
        for entry in PROC.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue  # it exited meanwhile
            # After the command: state, ppid, ..., utime, stime, and the same for the
            # children it has waited for (fields 12 to 15), so that a worker or a
            # backend that exits during a run still counts, in its parent.
            found[int(entry.name)] = (int(fields[1]), sum(map(int, fields[11:15])) / self.hz)
        return found

    def _machine_busy(self) -> float:
        values = [int(x) for x in (PROC / "stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
        return (sum(values[:8]) - idle) / self.hz

    def snapshot(self) -> dict[str, float]:
        if not self.available:
            return {}
        processes = self._processes()
        children: dict[int, list[int]] = {}
        for pid, (parent, _) in processes.items():
            children.setdefault(parent, []).append(pid)
        out = {}
        for name, root in self.roots.items():
            total, todo = 0.0, [root]
            while todo:
                pid = todo.pop()
                if pid in processes:
                    total += processes[pid][1]
                todo.extend(children.get(pid, []))
            out[name] = total
        out["machine"] = self._machine_busy()
        return out

    @staticmethod
    def per_request(before: dict[str, float], after: dict[str, float],
                    requests: int) -> dict[str, float]:
        """Microseconds of CPU per request, per tree and for the machine."""
        if not before or not requests:
            return {}
        return {name: round((after[name] - before[name]) / requests * 1e6, 1)
                for name in before}


def database_server_pid(url: str) -> int | None:
    """The PostgreSQL server's main process, when it runs on this machine (else None)."""
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=5) as connection:
            backend = connection.execute("SELECT pg_backend_pid()").fetchone()
    except Exception:  # no figures rather than no benchmark
        return None
    if backend is None:
        return None
    try:
        stat = (PROC / str(backend[0]) / "stat").read_text()
    except OSError:
        return None  # not on this machine
    return int(stat.rsplit(")", 1)[1].split()[1])
