"""The benchmark's CPU accounting: a process tree's CPU, read from /proc, per request."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bench.cpu import CpuMeter

pytestmark = pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs Linux /proc")

# A parent that spends no CPU itself and starts a child that spins for a while: the
# tree's CPU is the child's, which the meter must find through the parent. The child
# spins only when the test says go (a line on the stdin it shares with its parent), and
# the parent says when it has waited for it: both snapshots bracket the spin whatever
# the machine's load, instead of a sleep the spin must fit in.
SPIN = ("import sys, time\nsys.stdin.readline()\n"
        "end = time.process_time() + {seconds}\nwhile time.process_time() < end: pass")
IDLE = "import time; print('ready', flush=True); time.sleep(30)"
PARENT = ("import subprocess, sys; subprocess.run([sys.executable, '-c', sys.argv[1]]);"
          " print('spun', flush=True); import time; time.sleep(30)")


def test_a_tree_counts_its_childrens_cpu_and_nothing_else() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, SPIN.format(seconds=0.4)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    idle = subprocess.Popen([sys.executable, "-c", IDLE], stdout=subprocess.PIPE, text=True)
    watchdog = threading.Timer(60, lambda: (parent.kill(), idle.kill()))  # bounds the reads
    watchdog.start()
    try:
        assert idle.stdout is not None
        assert idle.stdout.readline().strip() == "ready"  # its start-up is not in the figure
        meter = CpuMeter({"busy": parent.pid, "idle": idle.pid, "gone": None})
        before = meter.snapshot()
        assert set(before) == {"busy", "idle", "machine"}  # no root, no figure
        assert parent.stdin is not None and parent.stdout is not None
        parent.stdin.write("go\n")
        parent.stdin.flush()
        assert parent.stdout.readline().strip() == "spun"  # the child spun, and was waited for
        after = meter.snapshot()
    finally:
        watchdog.cancel()
        parent.kill()
        idle.kill()
        parent.communicate()
        idle.communicate()
    per = CpuMeter.per_request(before, after, requests=4)
    # The child's 0.4 s (plus, at most, its interpreter's start-up), counted in its parent
    # once it exited and was waited for; a sleeping process costs almost nothing.
    assert 0.2e6 / 4 <= per["busy"] <= 0.7e6 / 4
    assert per["idle"] < 0.02e6 / 4
    assert per["machine"] >= per["busy"]


def test_per_request_is_microseconds_per_request() -> None:
    assert CpuMeter.per_request({"app": 1.0, "machine": 2.0}, {"app": 1.5, "machine": 3.0},
                                requests=1000) == {"app": 500.0, "machine": 1000.0}
    assert CpuMeter.per_request({}, {}, requests=10) == {}
    assert CpuMeter.per_request({"app": 1.0}, {"app": 2.0}, requests=0) == {}
