"""Provides the verification stage: the tool's ``verify``, with its own signal and deadline.

It judges every result, replays included, except one a person decided (reconciliation):
a person's decision is final.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import connections

from guarded_tools.core.cancellation import CancelSignal
from guarded_tools.core.errors import VerificationError
from guarded_tools.pipeline.stages.base import Call, Stage, decision, principal_kwargs

if TYPE_CHECKING:
    from guarded_tools.core.definition import Tool

logger = logging.getLogger("guarded_tools")


class VerificationStage(Stage):
    """Raises ``VerificationError`` when ``verify`` says the effect did not happen."""

    name = "verification"
    stateless = True

    @classmethod
    def has_work(cls, tool: Tool, hook: str) -> bool:
        if hook in ("after_execute", "on_replay"):
            # Both hooks call ``self.verify``, a method of this stage a subclass may
            # override without touching either hook: its own ``verify`` is work.
            return tool.verify is not None or cls.verify is not VerificationStage.verify
        return True

    def after_execute(self, call: Call, result: Any) -> None:
        self.verify(call, result)

    def on_replay(self, call: Call, result: Any) -> None:
        if not result.reconciled:
            self.verify(call, result)

    def verify(self, call: Call, result: Any) -> None:
        """Run ``verify`` with its own signal, bounded by ``verify_timeout``."""
        verifier = call.tool.verify
        if verifier is None:
            return
        inv, signal = call.inv, CancelSignal()
        kwargs = {"input": dict(inv.input), "output": result.output, "context": inv.context,
                  "replayed": result.replayed, "recovered": result.recovered,
                  "signal": signal, **principal_kwargs(verifier, inv)}
        timeout = call.tool.verify_timeout
        if timeout is None:
            answer = verifier(**kwargs)
        else:
            answer = call_with_deadline(verifier, kwargs, timeout, signal)
        verified, reason = decision(answer, "verified")
        if not verified:
            # The verifier's reason is application text that may quote the input: DEBUG only.
            logger.warning("tool %s: verification failed", call.tool.name)
            logger.debug("tool %s: verification failed: %s", call.tool.name, reason)
            raise VerificationError()
        call.events.emit("verified")


def call_with_deadline(
    fn: Callable[..., Any], kwargs: dict[str, Any], timeout: float, signal: CancelSignal
) -> Any:
    """Call ``fn`` in a thread of its own and give up on it at the deadline.

    Inside a transaction (an atomic tool's, or the site's own) the verifier must use
    this thread's connection instead: another thread's could not see the uncommitted
    effect it is there to check. The deadline then aborts its signal, and an answer
    that comes after it fails verification all the same.
    """
    if any(c.in_atomic_block for c in connections.all(initialized_only=True)):
        return _in_this_thread(fn, kwargs, timeout, signal)

    def target() -> Any:
        try:
            return fn(**kwargs)
        finally:
            connections.close_all()

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="gt-verify")
    future = pool.submit(target)
    try:
        return future.result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        signal.abort("verify_timeout")
        raise VerificationError("Verification did not finish in time.") from None
    finally:
        pool.shutdown(wait=False)


def _in_this_thread(
    fn: Callable[..., Any], kwargs: dict[str, Any], timeout: float, signal: CancelSignal
) -> Any:
    timer = threading.Timer(timeout, signal.abort, args=("verify_timeout",))
    timer.daemon = True
    timer.start()
    try:
        answer = fn(**kwargs)
    finally:
        timer.cancel()
    if signal.aborted:
        raise VerificationError("Verification did not finish in time.")
    return answer
