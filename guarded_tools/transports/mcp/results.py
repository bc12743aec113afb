"""Provides the tool results of a call: its answer, or a guard error worded for MCP."""

from __future__ import annotations

from typing import Any

from guarded_tools.core.definition import Tool
from guarded_tools.core.errors import GuardError
from guarded_tools.core.jsonvalues import JSON_ENCODER, Spliced
from guarded_tools.core.repair import Audience
from guarded_tools.pipeline import GuardResult
from guarded_tools.transports.mcp.protocol import ERROR_META, OPERATION_META, json_string


def _text(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


def success_result(definition: Tool, result: GuardResult, *, modern: bool) -> dict[str, Any]:
    """The answer's text content is the output's JSON text, as the guard made it (a replay
    read from the database: encoded so here); its structured content, that same text.
    Both go into the response as they are (``json_response``)."""
    text = result.answer_json()
    if text is None:
        text = JSON_ENCODER.encode(result.answer())
    data: dict[str, Any] = {
        "content": [{"type": "text", "text": json_string(text)}],
        "isError": False,
    }
    # Up to 2025-11-25 structured content must be an object.
    if text.startswith("{") or (modern and definition.output_schema is not None):
        data["structuredContent"] = Spliced(text)
    if result.operation is not None:
        data["_meta"] = {OPERATION_META: result.operation}
    return data


def error_result(definition: Tool, error: GuardError, docs: str = "") -> dict[str, Any]:
    """A guard error as a tool result: the portable message, and the structured error.

    The structured error is always in ``_meta``; it is also ``structuredContent`` unless
    the tool declares an output schema, because some clients validate an error
    result's structured content against that schema and then hide the error. Both
    are worded for an MCP caller of this tool.
    """
    audience = Audience(transport="mcp", keyed=definition.idempotent)
    structured = error.as_dict(docs, audience)
    retry_after = error.headers.get("Retry-After", "")
    if retry_after.isdigit():
        structured["retry_after"] = int(retry_after)
    return error_result_from(definition, structured)


def _request_text(structured: dict[str, Any]) -> str:
    """Which request a ``confirmation_required`` waits on, until when, and where it stands.

    Over MCP the structured error may travel only in ``_meta``, which many hosts never show
    the model: the text it reads must say what the agent needs to follow the request up.
    """
    summary = structured.get("confirmation")
    if structured.get("code") != "confirmation_required" or not isinstance(summary, dict):
        return ""
    text = f"Request {summary.get('id')} waits until {summary.get('expires_at')}"
    approvals = summary.get("approvals")
    if summary.get("decides") == "owner" or summary.get("url"):
        text += " for the user this call acts for to approve it themself."
    elif isinstance(approvals, dict):
        text += (f" for approval: {approvals.get('given')} of {approvals.get('required')}"
                 " approvals given.")
    else:  # a tool's own confirmation: one person's approval, none given while it waits
        text += " for approval: 0 of 1 approvals given."
    if isinstance(structured.get("retry_after"), int):
        text += f" Ask again in {structured['retry_after']} seconds at the earliest."
    return text


def error_result_from(definition: Tool, structured: dict[str, Any]) -> dict[str, Any]:
    """The tool result of a structured error (:func:`error_result`)."""
    message = " ".join(part for part in (structured["message"], _request_text(structured))
                       if part)
    data: dict[str, Any] = {
        "content": [_text(message)],
        "isError": True,
        "_meta": {ERROR_META: structured},
    }
    if definition.output_schema is None:
        data["structuredContent"] = structured
    if isinstance(structured.get("operation"), dict):
        data["_meta"][OPERATION_META] = structured["operation"]
    return data
