"""The bounded multi-node run: two web nodes, two workers, Redis, kills, one PostgreSQL."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from importlib.util import find_spec

import pytest
from django.db import connection

from tests.conftest import REPO_ROOT


# Django 6's PostgreSQL run only (one_django): its processes, Redis and kills are the same
# under either Django; Django 5.2's run proves the store's guarantees across processes and
# crashes in test_concurrency.py and test_crash.py.
@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.one_django
def test_multinode_quick_run_on_redis_keeps_every_effect_exactly_once() -> None:
    if connection.vendor != "postgresql" or not os.environ.get("DATABASE_URL"):
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")
    if shutil.which("redis-server") is None or find_spec("redis") is None:
        pytest.skip("needs redis-server (apt-get install redis-server) and the redis package")
    result = subprocess.run(
        [sys.executable, "scripts/multinode.py", "--quick"], cwd=REPO_ROOT, capture_output=True,
        text=True, timeout=300, env={**os.environ},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "killed with SIGKILL and restarted: web2, worker2, redis, web2" in out
    [total] = re.findall(r"exactly 1 for (\d+) of \1\b", out)
    assert int(total) > 100  # the 100 keys and the probe(s) a node died holding
    assert re.search(r"of the claims orphaned during the outage, (\d+) of \1 waited for it"
                     r" and the sweep took over \1\b", out)
    outage = re.search(r"answered while the broker was down: (\{.*\})", out)
    assert outage and "'200" in outage.group(1) and "'5" not in outage.group(1)
