"""Fault-injection points around the demo payment's effect, used by crash tests.

``GT_CRASH_AT=before_effect|after_effect`` makes the process die there with
``os._exit`` (as ``kill -9`` would), so tests can prove recovery end to end.
"""

import os


def _maybe_crash(point: str) -> None:
    if os.environ.get("GT_CRASH_AT") == point:
        os._exit(137)


def before_effect(reference: str) -> None:
    _maybe_crash("before_effect")


def after_effect(reference: str) -> None:
    _maybe_crash("after_effect")
