"""Provides the strict, size-limited JSON parser used by every tool endpoint."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework.parsers import BaseParser

from guarded_tools.conf import gt_settings
from guarded_tools.core.errors import MalformedRequest, RequestTooLarge
from guarded_tools.core.schema.validation import parse_json


def read_limited(stream: Any, meta: Any, limit: int) -> bytes:
    """Read at most ``limit`` bytes, refusing larger bodies before reading them whole."""
    try:
        declared = int(meta.get("CONTENT_LENGTH") or 0)
    except (TypeError, ValueError):
        declared = 0
    if declared > limit:
        raise RequestTooLarge()
    if stream is None:
        return b""
    # One read() may return fewer bytes than asked for (sockets, chunked bodies):
    # read until end of stream or until one byte past the limit proves it too large.
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = stream.read(limit + 1 - size)
        if not chunk:
            break
        chunks.append(bytes(chunk))
        size += len(chunk)
    if size > limit:
        raise RequestTooLarge()
    return b"".join(chunks)


class StrictJSONParser(BaseParser):
    """UTF-8 JSON with no duplicate keys, no NaN or Infinity, bounded size and depth."""

    media_type = "application/json"

    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        request = (parser_context or {}).get("request")
        meta = getattr(request, "META", {}) if request is not None else {}
        raw = read_limited(stream, meta, gt_settings.MAX_BODY_BYTES)
        if not raw.strip():
            return {}
        return parse_json(raw, max_depth=gt_settings.MAX_JSON_DEPTH)


def read_unframed_body(request: Any) -> Any | None:
    """The parsed body of a chunked request that has no Content-Length, or None.

    Django under WSGI (and so DRF) reads nothing without a Content-Length, which would
    make a chunked body look empty. Read it from the server's input ourselves, with the
    same size limit and the same strict parsing.
    """
    meta = request.META
    if meta.get("CONTENT_LENGTH") or "chunked" not in meta.get(
        "HTTP_TRANSFER_ENCODING", ""
    ).lower():
        return None
    stream = meta.get("wsgi.input")
    if stream is None:
        return None
    if not str(meta.get("CONTENT_TYPE", "")).startswith("application/json"):
        raise MalformedRequest(
            "Send the input as a JSON object with Content-Type application/json.", status=415
        )
    raw = read_limited(stream, {}, gt_settings.MAX_BODY_BYTES)
    if not raw.strip():
        return {}
    return parse_json(raw, max_depth=gt_settings.MAX_JSON_DEPTH)
