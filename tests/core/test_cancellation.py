"""The cancel signal handed to handlers: one-way, thread-safe, waited on across threads."""

from __future__ import annotations

import threading

from guarded_tools import CancelSignal
from guarded_tools.core.cancellation import Cancelled
from tests.conftest import wait_until


def test_a_thread_waiting_before_the_abort_is_woken_by_it() -> None:
    signal = CancelSignal()
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(signal.wait(30)))
    waiter.start()
    wait_until(lambda: signal._event is not None, timeout=30, step=0.001,
               message="the waiter never reached wait()")  # it waits on its event now
    signal.abort("client went away")
    waiter.join(30)
    assert woke == [True]
    assert signal.aborted and signal.reason == "client went away"


def test_a_wait_after_the_abort_returns_at_once_and_an_unaborted_one_times_out() -> None:
    signal = CancelSignal()
    assert signal.wait(0) is False and not signal.aborted
    signal.raise_if_aborted()  # nothing to raise yet
    signal.abort("deadline")
    signal.abort("second")  # one-way: the first reason stays
    assert signal.wait(None) is True and signal.reason == "deadline"
    try:
        signal.raise_if_aborted()
    except Cancelled as exc:
        assert str(exc) == "deadline"
    else:
        raise AssertionError("an aborted signal must raise")


def test_listeners_hear_the_abort_once_and_late_ones_at_once() -> None:
    signal = CancelSignal()
    heard: list[str] = []
    signal.on_abort(heard.append)
    signal.abort("stop")
    signal.abort("again")
    signal.on_abort(lambda reason: heard.append(f"late: {reason}"))
    assert heard == ["stop", "late: stop"]
