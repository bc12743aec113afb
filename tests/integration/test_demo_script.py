"""`make demo` (scripts/demo.sh) as a process manager runs it: started, then stopped by SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, free_port, wait_until

TOKEN = "demo-agent-token-0000000000000000000000"

pytestmark = [pytest.mark.slow, pytest.mark.once]


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def marked(marker: str) -> dict[int, str]:
    """The processes (pid: command line) whose environment carries ``marker``: the demo's."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # gone meanwhile, or not ours
            continue
        if f"GT_DEMO_RUN={marker}".encode() in environ.split(b"\0"):
            found[int(entry.name)] = cmdline
    return found


def demo_output(log: Path, what: str) -> Callable[[], str]:
    """What a wait for WHAT says when it times out: the demo's output so far."""
    return lambda: f"timed out waiting for {what}; the demo's output:\n{log.read_text()}"


def answers(port: int) -> bool:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/agent/tools/",
                                     headers={"Authorization": f"Token {TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.mark.parametrize("command", [["bash", "scripts/demo.sh"], ["make", "-s", "demo"]],
                         ids=["demo.sh", "make-demo"])
def test_sigterm_stops_the_demo_leaving_no_process_and_the_port_free(
        tmp_path: Path, command: list[str]) -> None:
    """SIGTERM to `make demo` or demo.sh stops honcho, web and worker, and is no failure:
    the script exits 0, so make reports no error. The banner names every demo user."""
    port, marker, log = free_port(), uuid.uuid4().hex, tmp_path / "demo.log"
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE")}
    env.update(PORT=str(port), GT_VAR_DIR=str(tmp_path / "var"), GT_DEMO_RUN=marker,
               GT_TELEMETRY="0")
    with log.open("wb") as out:
        demo = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_until(lambda: answers(port), 300, 0.1,
                   message=demo_output(log, "the site to answer"))
        wait_until(lambda: any("celery" in c for c in marked(marker).values()), 180, 0.1,
                   message=demo_output(log, "the worker"))
        assert any("runserver" in c for c in marked(marker).values())
        demo.send_signal(signal.SIGTERM)  # to the script (or make) only, as a manager does
        wait_until(lambda: demo.poll() is not None, 120, 0.1,
                   message=demo_output(log, "the demo to exit"))
        wait_until(lambda: not marked(marker), 120, 0.1,
                   message=demo_output(log, "every demo process to exit"))
        wait_until(lambda: port_free(port), 120, 0.1,
                   message=demo_output(log, "the port to be free"))
        # demo.sh exits 0 after the clean stop; make ends by the signal it got, and says
        # nothing of an error (it did, "make: *** [Makefile:…: demo] Error 143", when the
        # script exited 143).
        assert demo.returncode == (0 if command[0] == "bash" else -signal.SIGTERM)
        output = log.read_text()
        assert "SIGTERM received" in output  # honcho's: it stopped its processes
        assert "demo.sh: stopped (SIGTERM)" in output
        assert "Error 143" not in output and "make: ***" not in output
        # The banner names the approvers the walk-through needs, and the operator.
        assert "staff/staff" in output
        assert "approver/approver" in output and "approver2/approver2" in output
    finally:
        for pid in marked(marker):  # only what this test started
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if demo.poll() is None:
            demo.kill()
            demo.wait(10)
