"""A child from the fork server (tests/forkserver.py) behaves as ``subprocess``'s would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import forkserver

pytestmark = [
    pytest.mark.once,  # the interpreter's and the kernel's behaviour, whichever Django
    pytest.mark.skipif(os.environ.get("GT_TEST_FORKSERVER") == "0",
                       reason="GT_TEST_FORKSERVER=0 starts every child with subprocess"),
]

PROBE = (
    "import json, os, sys\n"
    "print(json.dumps({'argv': sys.argv, 'cwd': os.getcwd(), 'env': os.environ.get('PROBE'),\n"
    "                  'path0': sys.path[0], 'main': __name__, 'settings': 'django.conf' in\n"
    "                  sys.modules and bool(sys.modules['django.conf'].settings.configured)}))\n"
    "print('to stderr', file=sys.stderr)\n"
    "sys.exit(int(sys.argv[1]))\n"
)


def both(args: list[str], **kwargs: object) -> tuple[object, object]:
    ours = forkserver.run(args, **kwargs)  # type: ignore[arg-type]
    theirs = subprocess.run(args, **kwargs)  # type: ignore[call-overload]
    return ours, theirs


def test_argv_cwd_environment_streams_and_exit_code_are_the_childs_own(tmp_path: Path) -> None:
    env = {**os.environ, "PROBE": "yes"}
    ours, theirs = both([sys.executable, "-c", PROBE, "3", "x y"], cwd=tmp_path, env=env,
                        capture_output=True, text=True, timeout=60)
    with forkserver.popen([sys.executable, "-c", "pass"]) as child:
        assert isinstance(child, forkserver.Child)
    assert (ours.returncode, ours.stdout, ours.stderr) == (  # type: ignore[attr-defined]
        theirs.returncode, theirs.stdout, theirs.stderr) == (  # type: ignore[attr-defined]
        3, theirs.stdout, "to stderr\n")  # type: ignore[attr-defined]
    assert '"settings": false' in ours.stdout  # type: ignore[attr-defined]


def test_an_uncaught_exception_and_a_module_run_as_main() -> None:
    ours, theirs = both([sys.executable, "-c", "raise ValueError('boom')"],
                        capture_output=True, text=True)
    assert ours.returncode == theirs.returncode == 1  # type: ignore[attr-defined]
    assert ours.stderr.splitlines()[-1] == "ValueError: boom"  # type: ignore[attr-defined]
    ours, theirs = both([sys.executable, "-m", "json.tool"], stdin=subprocess.DEVNULL,
                        capture_output=True, text=True)
    assert (ours.returncode, ours.stdout) == (  # type: ignore[attr-defined]
        theirs.returncode, theirs.stdout)  # type: ignore[attr-defined]


def test_sigkill_reaches_the_child_and_its_group_and_wait_sees_it_dead() -> None:
    child = forkserver.popen([sys.executable, "-c", "import time; print('up', flush=True); "
                              "time.sleep(120)"], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    assert isinstance(child, forkserver.Child)
    assert child.stdout is not None and child.stdout.readline() == "up\n"
    assert child.poll() is None and os.getpgid(child.pid) == child.pid
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(0.05)
    os.killpg(child.pid, signal.SIGKILL)
    assert child.wait(30) == -signal.SIGKILL
    with pytest.raises(ProcessLookupError):
        os.kill(child.pid, 0)  # reaped: no zombie left behind


def test_sigterm_runs_the_childs_handlers_and_a_normal_exit() -> None:
    code = ("import atexit, signal, sys, time\n"
            "atexit.register(lambda: print('atexit ran', flush=True))\n"
            "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\n"
            "print('ready', flush=True)\n"
            "time.sleep(120)\n")
    child = forkserver.popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    child.terminate()
    out, _ = child.communicate(timeout=30)
    assert (child.returncode, out) == (7, "atexit ran\n")


def test_what_it_cannot_start_goes_to_subprocess() -> None:
    with forkserver.popen(["true"]) as other:
        assert isinstance(other, subprocess.Popen)
    with forkserver.popen([sys.executable, "-c", "pass"], stdin=subprocess.PIPE) as piped:
        assert isinstance(piped, subprocess.Popen)


def test_a_request_too_large_for_one_message_goes_to_subprocess_and_the_server_stays() -> None:
    # Four 100 kB variables: under the kernel's limits for an exec, over a socket's message.
    env = {**os.environ, **{f"LARGE{i}": "x" * 100_000 for i in range(4)}}
    count = "import os; print(sum(len(v) for k, v in os.environ.items() if k.startswith('LARGE')))"
    with forkserver.popen([sys.executable, "-c", count], env=env, stdout=subprocess.PIPE,
                          text=True) as large:
        assert isinstance(large, subprocess.Popen)
        assert large.stdout is not None and large.stdout.read() == "400000\n"
    with forkserver.popen([sys.executable, "-c", "pass"]) as after:
        assert isinstance(after, forkserver.Child)
