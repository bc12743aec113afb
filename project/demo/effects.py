"""Fault-injection points around the demo payment's effect, used by crash tests.

``GT_CRASH_AT=after_claim|before_effect|after_effect`` makes the process die there with
``os._exit`` (as ``kill -9`` would), so tests can prove recovery end to end.
``GT_CRASH_AT=sleep:<point>`` makes it sleep there instead (30 s), so that a test can
send it a real SIGKILL while it is stalled at that point (it says so on stderr first).
"""

import os
import sys
import time


def _maybe_crash(point: str) -> None:
    crash_at = os.environ.get("GT_CRASH_AT")
    if crash_at == point:
        os._exit(137)
    if crash_at == f"sleep:{point}":
        sys.stderr.write(f"GT_CRASH_AT: sleeping at {point}\n")
        sys.stderr.flush()
        time.sleep(30)


def after_claim(reference: str) -> None:
    """The claim is committed and the handler started; nothing is journaled yet."""
    _maybe_crash("after_claim")


def before_effect(reference: str) -> None:
    # GT_EFFECT_DELAY widens the window a load test can kill a process in.
    delay = float(os.environ.get("GT_EFFECT_DELAY") or 0)
    if delay:
        time.sleep(delay)
    _maybe_crash("before_effect")


def after_effect(reference: str) -> None:
    _maybe_crash("after_effect")
