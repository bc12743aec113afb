"""Provides the MCP wire basics: versions, JSON-RPC error codes, meta keys, the framing."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from typing import Any

from django.http import HttpResponse
from rest_framework.request import Request
from rest_framework.utils.encoders import JSONEncoder

from guarded_tools.core.jsonvalues import Spliced
from guarded_tools.core.repair import Audience
from guarded_tools.transports.mcp import tasks as tasks_ext

#: Who reads an error that is about no tool (the transport's own refusals, an unknown tool).
NO_TOOL = Audience(transport="mcp", tool=False)

# -- protocol constants ---------------------------------------------------------------------
MODERN_VERSIONS: tuple[str, ...] = ("2026-07-28",)
HANDSHAKE_VERSIONS: tuple[str, ...] = ("2025-11-25", "2025-06-18", "2025-03-26")
SUPPORTED_VERSIONS: tuple[str, ...] = (*MODERN_VERSIONS, *HANDSHAKE_VERSIONS)
BATCH_VERSION = "2025-03-26"  # the only supported revision whose servers must accept batches
MAX_BATCH = 20

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HEADER_MISMATCH = -32020
MISSING_CAPABILITY = -32021
UNSUPPORTED_VERSION = -32022
# Application-defined (outside the JSON-RPC reserved range): the site refused the
# request before any method ran — authentication, permission, origin, throttle.
# ``error.data.code`` names which.
REQUEST_REFUSED = -31000
# A task's call ended in a decision the guard owns (declined, expired, outcome unknown):
# the task is ``failed`` with this error; ``error.data`` is the structured error.
TASK_CALL_FAILED = -31001
# ``tasks/cancel`` after the call started, or after the task ended; the message says which.
TASK_NOT_CANCELLABLE = -31002

VERSION_META = "io.modelcontextprotocol/protocolVersion"
CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"
META_PREFIX = "io.github.guarded-tools"
OPERATION_META = f"{META_PREFIX}/operation"
ERROR_META = f"{META_PREFIX}/error"
#: What the caller has left of each budget of the tool, and when it frees (every answer).
BUDGETS_META = f"{META_PREFIX}/budgets"

TASK_META = f"{META_PREFIX}/mayAnswerWithTask"


_MODERN_STATUS = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    UNSUPPORTED_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}
# Handshake-era errors about a method travel in a 200 body: a 404 there means
# "session terminated" to some clients.
_HANDSHAKE_STATUS = {PARSE_ERROR: 400, INVALID_REQUEST: 400, UNSUPPORTED_VERSION: 400}


class RpcError(Exception):
    """A JSON-RPC error for the current message."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


@dataclass(frozen=True)
class Exchange:
    """One POST: the DRF request, the protocol version it speaks and its era.

    ``wait_until`` (read on ``clock``, the view's ``time.monotonic``) ends the POST's
    ``Prefer: wait``: the bound is for the request, shared by every call of a batch, not
    granted to each of them.
    """

    request: Request
    version: str
    modern: bool
    wait_until: float = 0.0
    #: The clock ``wait_until`` was read on (the view's), so both ends of the bound agree.
    clock: Callable[[], float] = time.monotonic

    def wait_left(self) -> float:
        """What is left of the request's ``Prefer: wait`` for the next call to use."""
        return max(self.wait_until - self.clock(), 0.0)


# -- JSON-RPC framing -----------------------------------------------------------------------
#: What ``json.dumps(value, cls=JSONEncoder, ensure_ascii=False)`` writes, built once.
ENCODER = JSONEncoder(ensure_ascii=False)


#: The mark a :class:`Spliced` value is first encoded as: a random token, one per process.
#: A body where it shows more often than it was written (a value holding it), or a text
#: that holds it, is encoded again with the texts decoded, so no value is taken for a mark.
_MARK = uuid.uuid4().hex


class _Decoding(JSONEncoder):
    """``ENCODER``, writing each :class:`Spliced` as the value its text stands for."""

    def default(self, o: Any) -> Any:
        return o.value() if isinstance(o, Spliced) else super().default(o)


class SplicingEncoder(JSONEncoder):
    """``ENCODER``, writing each :class:`Spliced` in the payload as its text.

    Each one is encoded as a mark (``_MARK`` and its number), which the text then
    replaces: the text goes into the body as it is, never decoded and encoded again.
    """

    def __init__(self) -> None:
        super().__init__(ensure_ascii=False)
        self.texts: list[str] = []

    def default(self, o: Any) -> Any:
        if isinstance(o, Spliced):
            self.texts.append(o.text)
            return f"{_MARK}-{len(self.texts) - 1}"
        return super().default(o)

    def encode(self, o: Any) -> str:
        body = super().encode(o)
        if not self.texts:
            return body
        if body.count(_MARK) != len(self.texts) or any(_MARK in t for t in self.texts):
            return _Decoding(ensure_ascii=False).encode(o)
        for i, text in enumerate(self.texts):
            body = body.replace(f'"{_MARK}-{i}"', text, 1)
        return body


def json_string(text: str) -> Spliced:
    """``text`` as a JSON string (escaped, as ``ENCODER`` writes a string in a body), to be
    spliced into a body as it is."""
    return Spliced(ENCODER.encode(text))


class _Unsure(Exception):
    """A payload :func:`compose` leaves to :class:`SplicingEncoder` (a key that is not a
    string, a container too deep to walk)."""


def _write(o: Any, parts: list[str], depth: int) -> None:
    if isinstance(o, dict):
        if depth > _MAX_WALK:
            raise _Unsure
        sep = "{"
        for key, value in o.items():
            if type(key) is not str:
                raise _Unsure
            parts.append(sep)
            parts.append(encode_basestring(key))
            parts.append(": ")
            # Strings, an answer's commonest values, without a call of their own.
            if type(value) is str:
                parts.append(encode_basestring(value))
            else:
                _write(value, parts, depth + 1)
            sep = ", "
        parts.append("{}" if sep == "{" else "}")
    elif isinstance(o, list | tuple):
        if depth > _MAX_WALK:
            raise _Unsure
        sep = "["
        for value in o:
            parts.append(sep)
            _write(value, parts, depth + 1)
            sep = ", "
        parts.append("[]" if sep == "[" else "]")
    elif isinstance(o, str):
        parts.append(encode_basestring(o))
    elif isinstance(o, Spliced):
        parts.append(o.text)
    elif o is None:
        parts.append("null")
    elif o is True:
        parts.append("true")
    elif o is False:
        parts.append("false")
    elif type(o) is int:
        parts.append(int.__repr__(o))
    else:  # floats, Decimals, dates, lazy text...: as ENCODER writes them
        parts.append(ENCODER.encode(o))


#: How deep :func:`compose` walks a payload before leaving it to ``SplicingEncoder``.
_MAX_WALK = 64


def compose(payload: Any) -> str:
    """What ``SplicingEncoder`` writes for ``payload``, written directly: containers
    walked here, each :class:`Spliced` as its text, every other value by ``ENCODER``. A
    JSON-RPC answer is small and its outputs are already text, so this costs about half
    the encoder's marks and replacements."""
    parts: list[str] = []
    try:
        _write(payload, parts, 0)
    except _Unsure:
        return SplicingEncoder().encode(payload)
    return "".join(parts)


def json_response(payload: Any, status: int = 200) -> HttpResponse:
    return HttpResponse(compose(payload).encode("utf-8"), status=status,
                        content_type="application/json")


def rpc_error(rid: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": rid, "error": error}


def is_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def id_of(message: Any) -> Any:
    rid = message.get("id") if isinstance(message, dict) else None
    return rid if is_id(rid) else None


def _status(ex: Exchange, reply: dict[str, Any]) -> int:
    if "error" not in reply:
        return 200
    table = _MODERN_STATUS if ex.modern else _HANDSHAKE_STATUS
    return table.get(reply["error"]["code"], 200)


def respond(ex: Exchange, reply: dict[str, Any] | None) -> HttpResponse:
    """202 with no body for an accepted notification, else the reply with its status."""
    if reply is None:
        return HttpResponse(status=202)
    return json_response(reply, status=_status(ex, reply))



def _client_capabilities(params: dict[str, Any]) -> dict[str, Any]:
    meta = params.get("_meta")
    caps = meta.get(CAPABILITIES_META) if isinstance(meta, dict) else None
    return caps if isinstance(caps, dict) else {}


def declares_tasks(ex: Exchange, params: dict[str, Any]) -> bool:
    """The request declares the Tasks extension (only 2026-07-28 defines it)."""
    extensions = _client_capabilities(params).get("extensions")
    return ex.modern and isinstance(extensions, dict) and isinstance(
        extensions.get(tasks_ext.EXTENSION), dict)


def accepts_url_elicitation(ex: Exchange, params: dict[str, Any]) -> bool:
    """The request declares URL-mode elicitation, which an ``inputRequests`` may then use."""
    elicitation = _client_capabilities(params).get("elicitation")
    return ex.modern and isinstance(elicitation, dict) and isinstance(elicitation.get("url"),
                                                                      dict)
