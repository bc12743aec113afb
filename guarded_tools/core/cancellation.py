"""Provides the cancellation signal handed to handlers, verifiers and recover hooks."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger("guarded_tools")


class Cancelled(Exception):
    """Raised by :meth:`CancelSignal.raise_if_aborted` once the signal is aborted."""


class CancelSignal:
    """A thread-safe, one-way abort flag (the Python cousin of ``AbortSignal``).

    The pipeline aborts a handler's signal when the caller goes away; finalization
    (journal writes after the effect, verify, completion) uses its own signal that
    the caller can never abort.
    """

    def __init__(self) -> None:
        # The event a waiter blocks on is made by the first ``wait``: most signals are
        # never waited on, and an Event is a condition and a lock to build per call.
        self._event: threading.Event | None = None
        self._lock = threading.Lock()
        self._aborted = False
        self._callbacks: list[Callable[[str], None]] = []
        self.reason: str | None = None

    @property
    def aborted(self) -> bool:
        return self._aborted

    def abort(self, reason: str = "aborted") -> None:
        with self._lock:
            if self._aborted:
                return
            self.reason = reason
            self._aborted = True
            if self._event is not None:
                self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback(reason)
            except Exception:  # a listener must not break the abort for the others
                logger.exception("cancellation listener failed")

    def on_abort(self, callback: Callable[[str], None]) -> None:
        with self._lock:
            if not self._aborted:
                self._callbacks.append(callback)
                return
        callback(self.reason or "aborted")

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the signal is aborted or ``timeout`` seconds pass; whether it was."""
        with self._lock:
            if self._aborted:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def raise_if_aborted(self) -> None:
        if self._aborted:
            raise Cancelled(self.reason or "aborted")
