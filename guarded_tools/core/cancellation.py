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
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[str], None]] = []
        self.reason: str | None = None

    @property
    def aborted(self) -> bool:
        return self._event.is_set()

    def abort(self, reason: str = "aborted") -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback(reason)
            except Exception:  # a listener must not break the abort for the others
                logger.exception("cancellation listener failed")

    def on_abort(self, callback: Callable[[str], None]) -> None:
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return
        callback(self.reason or "aborted")

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)

    def raise_if_aborted(self) -> None:
        if self._event.is_set():
            raise Cancelled(self.reason or "aborted")
