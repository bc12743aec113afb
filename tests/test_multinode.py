"""The bounded multi-node run: two web nodes, two workers, kills, one PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.postgres
def test_multinode_quick_run_keeps_every_effect_exactly_once() -> None:
    if connection.vendor != "postgresql" or not os.environ.get("DATABASE_URL"):
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")
    result = subprocess.run(
        [sys.executable, "scripts/multinode.py", "--quick"], cwd=ROOT, capture_output=True,
        text=True, timeout=300, env={**os.environ},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "effects per key: exactly 1 for 100 of 100" in result.stdout
    assert "killed with SIGKILL and restarted: web2, worker2" in result.stdout
