"""Provides the replay cache: succeeded operations kept in this process.

A succeeded operation never changes again (no transition leaves ``succeeded``), so
its stored output can be answered from memory: a retry that reaches the process
which already saw the result costs no SQL statement. Authorization and the
fingerprint check still run on every replay; only the read is skipped, and the
validation of the very input that was answered (it passed the same validator).

Entries live at most ``REPLAY_CACHE_SECONDS`` and the cache holds at most
``REPLAY_CACHE_SIZE`` of them (least recently used first out); outputs larger
than ``REPLAY_CACHE_MAX_BYTES`` are never kept. ``REPLAY_CACHE_SIZE = 0`` turns
it off. What a process cannot see is a row deleted by another process (retention
purge, an admin deletion): that process keeps answering the old result until the
entry expires, which never runs the handler twice.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from typing import Any, NamedTuple

from guarded_tools.conf import gt_settings
from guarded_tools.core.jsonvalues import JSON_ENCODER

Key = tuple[str, str, str]
#: The longest canonical input text an entry keeps (longer ones are hashed on replay).
CANONICAL_KEPT = 1024


class Remembered(NamedTuple):
    """What a replay needs: the fingerprint to compare and the stored answer.

    Immutable: a tuple, made on every fresh keyed call, which costs half of what a frozen
    dataclass does to build.
    """

    fingerprint: str
    output_json: str
    operation: dict[str, Any]
    recovered: bool
    expires: float
    #: A person decided the result: replays do not pass it to ``verify``.
    reconciled: bool = False
    #: The input's canonical text (``store.values.canonical``) when it is short, else "":
    #: a replay whose input has this text has this fingerprint, without hashing it again.
    canonical: str = ""

    @property
    def output(self) -> Any:
        """A fresh copy each time (JSON, as a replay from the database returns it)."""
        return json.loads(self.output_json)


class ReplayCache:
    """A bounded, thread-safe LRU of succeeded operations, keyed by (tool, scope, key)."""

    def __init__(self) -> None:
        self._entries: OrderedDict[Key, Remembered] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def enabled() -> bool:
        return int(gt_settings.REPLAY_CACHE_SIZE) > 0

    def get(self, tool: str, scope: str, key: str) -> Remembered | None:
        if not self.enabled():
            return None
        k = (tool, scope, key)
        with self._lock:
            found = self._entries.get(k)
            if found is None:
                return None
            if found.expires <= time.monotonic():
                del self._entries[k]
                return None
            self._entries.move_to_end(k)
            return found

    def put(self, tool: str, scope: str, key: str, *, fingerprint: str, output: Any,
            operation: dict[str, Any], recovered: bool, output_json: str | None = None,
            reconciled: bool = False, canonical: str = "") -> bool:
        """Remember a succeeded operation; False when it is too large or the cache is off.

        ``output_json`` is the output already serialized (``JSON_ENCODER``'s text, as the
        guard measured it); without it the output is encoded so. ``canonical``: the
        input's canonical text, whose digest ``fingerprint`` is; kept only up to
        ``CANONICAL_KEPT`` characters.
        """
        size = int(gt_settings.REPLAY_CACHE_SIZE)
        if size <= 0:
            return False
        try:
            text = output_json or JSON_ENCODER.encode(output)
        except (TypeError, ValueError):
            return False
        if len(text) > int(gt_settings.REPLAY_CACHE_MAX_BYTES):
            return False
        entry = Remembered(
            fingerprint=fingerprint,
            output_json=text,
            operation={**operation, "status": "succeeded", "replayed": True},
            recovered=recovered,
            expires=time.monotonic() + float(gt_settings.REPLAY_CACHE_SECONDS),
            reconciled=reconciled,
            canonical=canonical if len(canonical) <= CANONICAL_KEPT else "",
        )
        k = (tool, scope, key)
        with self._lock:
            self._entries[k] = entry
            self._entries.move_to_end(k)
            while len(self._entries) > size:
                self._entries.popitem(last=False)
        return True

    def clear(self) -> None:
        """Drop every entry (after a purge or an admin deletion in this process; in tests)."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


#: The process-wide cache the pipeline uses.
replays = ReplayCache()
