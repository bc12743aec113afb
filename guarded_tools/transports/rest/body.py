"""Provides a request body parsed once, by the view, and handed to DRF's ``Request``.

The view reads the body itself (:meth:`ParsedOnce.read`) rather than through
``request.data``, whose bookkeeping costs as much as the parse. DRF's ``Request`` is given
a :class:`ParsedOnce` as its only parser, so ``request.data`` (read by a handler, a
permission class or a site's ``EXCEPTION_HANDLER``) answers the same body, or the same
parse error, without parsing it again; whichever reads first parses.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from rest_framework.request import Request

from guarded_tools.core.schema.parsers import StrictJSONParser, read_unframed_body

__all__ = ["ParsedOnce", "read_body"]

_UNREAD: Any = object()


class ParsedOnce(StrictJSONParser):
    """:class:`~guarded_tools.core.schema.parsers.StrictJSONParser`, for one request: the
    first parse is kept, and every later one answers it (or raises its error again)."""

    def __init__(self) -> None:
        self._parsed: Any = _UNREAD
        self._error: Exception | None = None

    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        if self._error is not None:
            raise self._error
        if self._parsed is _UNREAD:
            try:
                self._parsed = super().parse(stream, media_type, parser_context)
            except Exception as exc:
                self._error = exc
                raise
        return self._parsed

    def read(self, request: Request) -> Any:
        """The request's body, strictly parsed, chunked bodies without Content-Length
        included: what ``request.data`` answers, without its bookkeeping when the request
        is plain ``application/json`` (what DRF would hand this parser, read from the same
        ``request.stream``)."""
        unframed = read_unframed_body(request)
        if unframed is not None:
            return unframed
        if self._parsed is _UNREAD and self._error is None and (
                request.content_type == self.media_type):
            stream = request.stream  # DRF's: None when empty, as request.data sees it
            if stream is not None:
                # A failure is kept: request.data raises it again, after DRF's bookkeeping.
                with contextlib.suppress(Exception):
                    return self.parse(stream, self.media_type, request.parser_context)
        return request.data


def read_body(request: Request) -> Any:
    """The request's body, strictly parsed: through its :class:`ParsedOnce` when DRF's
    ``Request`` was given one, else as ``request.data`` (chunked bodies included)."""
    for parser in request.parsers or ():
        if isinstance(parser, ParsedOnce):
            return parser.read(request)
    unframed = read_unframed_body(request)
    return request.data if unframed is None else unframed
