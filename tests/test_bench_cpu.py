"""The benchmark's CPU accounting: a process tree's CPU, read from /proc, per request."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.cpu import CpuMeter

pytestmark = pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs Linux /proc")

# A parent that spends no CPU itself and starts a child that spins for a while: the
# tree's CPU is the child's, which the meter must find through the parent.
SPIN = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass"
PARENT = ("import subprocess, sys; subprocess.run([sys.executable, '-c', sys.argv[1]]);"
          " import time; time.sleep(30)")


def test_a_tree_counts_its_childrens_cpu_and_nothing_else() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, SPIN.format(seconds=0.4)])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        meter = CpuMeter({"busy": parent.pid, "idle": idle.pid, "gone": None})
        before = meter.snapshot()
        assert set(before) == {"busy", "idle", "machine"}  # no root, no figure
        time.sleep(1.5)  # the child spins 0.4 s of CPU, then exits (its parent waits)
        after = meter.snapshot()
    finally:
        parent.kill()
        idle.kill()
        parent.wait()
        idle.wait()
    per = CpuMeter.per_request(before, after, requests=4)
    # The child's 0.4 s, counted in its parent once it exited and was waited for
    # (less what it spun before the first snapshot, plus interpreter start-up);
    # a sleeping process costs almost nothing.
    assert 0.2e6 / 4 <= per["busy"] <= 0.7e6 / 4
    assert per["idle"] < 0.02e6 / 4
    assert per["machine"] >= per["busy"]


def test_per_request_is_microseconds_per_request() -> None:
    assert CpuMeter.per_request({"app": 1.0, "machine": 2.0}, {"app": 1.5, "machine": 3.0},
                                requests=1000) == {"app": 500.0, "machine": 1000.0}
    assert CpuMeter.per_request({}, {}, requests=10) == {}
    assert CpuMeter.per_request({"app": 1.0}, {"app": 2.0}, requests=0) == {}
