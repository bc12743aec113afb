"""Telemetry: the OpenTelemetry observer's spans, metrics and gauges, and the demo's /metrics."""

from __future__ import annotations

import json
import logging
import secrets
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs guarded-tools[otel]")

from asgiref.sync import async_to_sync
from django.db import connections
from django.test import AsyncClient
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from guarded_tools import ToolError
from guarded_tools.models import Operation, OperationState
from guarded_tools.otel import OpenTelemetryObserver
from tests.conftest import key

REST = "/agent/tools/{}/"
MCP = "/agent/mcp/"
MODERN = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}
ITEM = {
    "type": "object",
    "properties": {"operationId": {"type": "string"}, "note": {"type": "string"},
                   "qty": {"type": "integer"}},
    "required": ["operationId"],
}
#: Stands for input, output, messages and details: it must reach no telemetry at all.
SENTINEL = "s3ntinel-7f1c9d"


@dataclass
class Caller:
    """The agent's side of a trace: the span it sent, as ids and as its header."""

    trace_id: int
    span_id: int
    traceparent: str
    tracestate: str = "vendor=abc"


def caller() -> Caller:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return Caller(int(trace_id, 16), int(span_id, 16), f"00-{trace_id}-{span_id}-01")


@dataclass
class Telemetry:
    """An observer on in-memory exporters, registered in ``OBSERVERS`` for one test."""

    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider

    def spans(self, tool: str) -> list[ReadableSpan]:
        name = f"guarded_tools.call {tool}"
        return [s for s in self.exporter.get_finished_spans() if s.name == name]

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        return [point for rm in (data.resource_metrics if data else [])
                for sm in rm.scope_metrics for metric in sm.metrics if metric.name == name
                for point in metric.data.data_points]

    def series(self, name: str, **labels: str) -> list[Any]:
        """The data points of ``name`` whose attributes include ``labels``."""
        return [p for p in self.points(name)
                if all(p.attributes.get(k) == v for k, v in labels.items())]

    def gauge(self, name: str, tool: str) -> int:
        (point,) = self.series(name, tool=tool)
        return int(point.value)

    def dump(self) -> str:
        """Everything exported: every span (names, attributes, events, status) and metric."""
        data = self.reader.get_metrics_data()
        spans = [s.to_json() for s in self.exporter.get_finished_spans()]
        return "\n".join([*spans, data.to_json() if data else ""])


@pytest.fixture
def telemetry(settings: Any) -> Iterator[Telemetry]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    observer = OpenTelemetryObserver(tracer_provider=tracer_provider,
                                     meter_provider=meter_provider)
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "OBSERVERS": [observer]}
    yield Telemetry(exporter, reader, tracer_provider)
    meter_provider.shutdown()
    tracer_provider.shutdown()


@pytest.fixture
def token_client(alice: Any) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=alice).key}")
    return client


def post(client: Any, name: str, body: Any, **headers: str) -> Any:
    return client.post(REST.format(name), body, format="json", headers=headers)


def mcp_call(client: Any, name: str, arguments: dict[str, Any], meta: dict[str, Any],
             *, modern: bool = True, **headers: str) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if modern:
        params["_meta"] = {**ENVELOPE, **meta}
        headers.update({"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call",
                        "Mcp-Name": name})
    else:
        params["_meta"] = meta
        headers["MCP-Protocol-Version"] = "2025-11-25"
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    response = client.post(MCP, json.dumps(message), content_type="application/json",
                           headers=headers)
    assert response.status_code == 200, response.content
    return dict(response.json()["result"])


def assert_continues(span: ReadableSpan, who: Caller) -> None:
    assert span.context.trace_id == who.trace_id
    assert span.parent is not None and span.parent.span_id == who.span_id
    assert span.parent.is_remote


def stages(span: ReadableSpan) -> list[str]:
    return [e.name for e in span.events]


# -- spans ----------------------------------------------------------------------------------
@pytest.mark.django_db
def test_a_token_rest_call_continues_the_callers_trace(
    telemetry: Telemetry, token_client: APIClient, make_tool: Any
) -> None:
    inner: list[Any] = []

    def handler(input: Any, ctx: Any) -> Any:  # the handler's own spans nest under the call
        with telemetry.tracer_provider.get_tracer("shop").start_as_current_span("charge") as s:
            inner.append(s)
        return {"ok": True}

    definition = make_tool(handler)
    who = caller()
    k = key()
    first = post(token_client, definition.name, {"operationId": k},
                 traceparent=who.traceparent, tracestate=who.tracestate)
    again = post(token_client, definition.name, {"operationId": k},
                 traceparent=who.traceparent)
    assert first.status_code == again.status_code == 200
    fresh, replay = telemetry.spans(definition.name)
    assert_continues(fresh, who)
    assert fresh.context.trace_state.get("vendor") == "abc"
    assert stages(fresh) == ["started", "executed", "output_validated", "succeeded"]
    assert fresh.attributes["guarded_tools.outcome"] == "succeeded"
    assert fresh.attributes["guarded_tools.transport"] == "rest"
    assert fresh.attributes["guarded_tools.operation_id"] == first.json()["operation"]["id"]
    assert fresh.attributes["guarded_tools.replayed"] is False
    assert fresh.status.status_code == StatusCode.UNSET
    assert inner[0].parent.span_id == fresh.context.span_id
    assert_continues(replay, who)
    assert stages(replay) == ["started", "replayed", "succeeded"]
    assert replay.attributes["guarded_tools.replayed"] is True
    assert replay.attributes["guarded_tools.operation_id"] == fresh.attributes[
        "guarded_tools.operation_id"]


@pytest.mark.django_db
def test_a_session_rest_call_continues_the_callers_trace(
    telemetry: Telemetry, session_client_for: Callable[[Any], Any], user_factory: Any,
    make_tool: Any,
) -> None:
    user = user_factory(perms=("demo.change_order",))
    definition = make_tool(permissions=["demo.change_order"])
    who = caller()
    response = post(session_client_for(user), definition.name, {"operationId": key()},
                    traceparent=who.traceparent)
    assert response.status_code == 200, response.content
    (span,) = telemetry.spans(definition.name)
    assert_continues(span, who)
    assert stages(span) == ["started", "authorized", "executed", "output_validated",
                            "succeeded"]


@pytest.mark.django_db
def test_an_mcp_call_continues_the_trace_in_its_meta(
    telemetry: Telemetry, token_client: APIClient, make_tool: Any
) -> None:
    definition = make_tool()
    who, elsewhere = caller(), caller()
    result = mcp_call(token_client, definition.name, {"operationId": key()},
                      {"traceparent": who.traceparent, "tracestate": who.tracestate},
                      traceparent=elsewhere.traceparent)  # the message's own context wins
    assert result["isError"] is False
    handshake = mcp_call(token_client, definition.name, {"operationId": key()}, {},
                         modern=False, traceparent=elsewhere.traceparent)
    assert handshake["isError"] is False
    in_meta, in_header = telemetry.spans(definition.name)
    assert_continues(in_meta, who)
    assert in_meta.context.trace_state.get("vendor") == "abc"
    assert in_meta.attributes["guarded_tools.transport"] == "mcp"
    assert in_meta.attributes["guarded_tools.operation_id"] == (
        result["_meta"]["io.github.guarded-tools/operation"]["id"])
    assert_continues(in_header, elsewhere)  # no context in _meta: the HTTP header's


@pytest.mark.django_db
def test_a_span_nests_under_the_sites_own_span_of_the_same_trace(
    telemetry: Telemetry, token_client: APIClient, make_tool: Any
) -> None:
    """Where the site's HTTP instrumentation already continued the header, the call's span
    is its child; a current span of another trace does not capture the caller's."""
    definition = make_tool()
    tracer = telemetry.tracer_provider.get_tracer("site")
    who = caller()
    remote = TraceContextTextMapPropagator().extract({"traceparent": who.traceparent})
    with tracer.start_as_current_span("GET /agent/", context=remote) as server:
        assert post(token_client, definition.name, {"operationId": key()},
                    traceparent=who.traceparent).status_code == 200
    with tracer.start_as_current_span("unrelated"):
        assert post(token_client, definition.name, {"operationId": key()},
                    traceparent=who.traceparent).status_code == 200
    nested, direct = telemetry.spans(definition.name)
    assert nested.context.trace_id == who.trace_id
    assert nested.parent is not None and nested.parent.span_id == server.get_span_context().span_id
    assert_continues(direct, who)


@pytest.mark.django_db(transaction=True)
def test_an_async_handler_under_asgi_nests_its_spans_in_the_call(
    telemetry: Telemetry, alice: Any, make_tool: Any, caplog: Any
) -> None:
    inner: list[Any] = []

    async def handler(input: Any, ctx: Any) -> Any:  # runs on the event loop's thread
        with telemetry.tracer_provider.get_tracer("shop").start_as_current_span("fetch") as s:
            inner.append(s)
        return {"ok": True}

    definition = make_tool(handler)
    who = caller()
    headers = {"Authorization": f"Token {Token.objects.create(user=alice).key}",
               "traceparent": who.traceparent}
    with caplog.at_level(logging.DEBUG, logger="opentelemetry"):
        response = async_to_sync(AsyncClient().post)(
            REST.format(definition.name), {"operationId": key()},
            content_type="application/json", headers=headers)
    assert response.status_code == 200, response.content
    (span,) = telemetry.spans(definition.name)
    assert_continues(span, who)
    assert inner[0].parent.span_id == span.context.span_id
    assert "Failed to detach context" not in caplog.text


@pytest.mark.django_db
def test_malformed_trace_context_starts_a_new_trace(
    telemetry: Telemetry, token_client: APIClient, make_tool: Any
) -> None:
    definition = make_tool()
    for bad in ("00-" + "0" * 32 + "-" + "1" * 16 + "-01", "garbage", "00-" + "a" * 500):
        assert post(token_client, definition.name, {"operationId": key()},
                    traceparent=bad).status_code == 200
    spans = telemetry.spans(definition.name)
    assert len(spans) == 3 and all(s.parent is None for s in spans)


@pytest.mark.django_db
def test_a_site_that_distrusts_callers_contexts_starts_its_own_traces(
    settings: Any, telemetry: Telemetry, token_client: APIClient, make_tool: Any
) -> None:
    own = OpenTelemetryObserver(tracer_provider=telemetry.tracer_provider, gauges=False,
                                continue_traces=False)
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "OBSERVERS": [own]}
    definition = make_tool()
    who = caller()
    assert post(token_client, definition.name, {"operationId": key()},
                traceparent=who.traceparent).status_code == 200
    (span,) = telemetry.spans(definition.name)
    assert span.parent is None and span.context.trace_id != who.trace_id


# -- outcomes and metrics -----------------------------------------------------------------------
@pytest.mark.django_db
def test_failures_mark_the_span_and_count_per_tool_and_outcome(
    telemetry: Telemetry, token_client: APIClient, make_tool: Any
) -> None:
    def refuse(input: Any, ctx: Any) -> Any:
        raise ToolError("out_of_stock", "No stock left.")

    def lose(input: Any, ctx: Any) -> Any:
        ctx.operation.write({"sent": True})
        raise RuntimeError("connection reset")

    ok, refused, lost = make_tool(), make_tool(refuse), make_tool(lose)
    k = key()
    assert post(token_client, ok.name, {"operationId": k}).status_code == 200
    assert post(token_client, ok.name, {"operationId": k}).status_code == 200
    assert post(token_client, ok.name, {"operationId": key()}).status_code == 200
    assert post(token_client, refused.name, {"operationId": key()}).status_code == 409
    assert post(token_client, lost.name, {"operationId": key()}).status_code == 500

    assert trace.get_current_span() is trace.INVALID_SPAN  # every call detached its span
    (refused_span,) = telemetry.spans(refused.name)
    assert refused_span.status.status_code == StatusCode.ERROR
    assert refused_span.status.description == "out_of_stock"
    assert refused_span.attributes["error.type"] == "out_of_stock"
    assert refused_span.attributes["guarded_tools.outcome"] == "failed"
    (lost_span,) = telemetry.spans(lost.name)
    assert lost_span.attributes["guarded_tools.outcome"] == "outcome_unknown"
    assert lost_span.status.status_code == StatusCode.ERROR

    def count(tool: str, outcome: str, **labels: str) -> int:
        return sum(int(p.value) for p in telemetry.series(
            "guarded_tools.calls", tool=tool, outcome=outcome, **labels))

    assert count(ok.name, "succeeded", replayed="false", transport="rest") == 2
    assert count(ok.name, "succeeded", replayed="true") == 1
    assert count(refused.name, "failed", code="out_of_stock") == 1
    assert count(lost.name, "outcome_unknown", code="outcome_unknown") == 1
    assert count(ok.name, "failed") == 0
    durations = telemetry.series("guarded_tools.call.duration", tool=ok.name)
    assert sum(p.count for p in durations) == 3
    assert all(0 < p.sum < 60 for p in durations)
    assert sum(p.count for p in telemetry.series("guarded_tools.call.duration",
                                                 tool=lost.name, outcome="outcome_unknown")) == 1


@pytest.mark.django_db
def test_no_input_output_message_or_details_reach_telemetry(
    telemetry: Telemetry, token_client: APIClient, make_tool: Any
) -> None:
    def echo(input: Any, ctx: Any) -> Any:
        if input.get("qty") == 2:
            raise ToolError("refused", f"Refused {input['note']}.", details={"n": SENTINEL})
        return {"echo": input["note"], "more": SENTINEL + "-out"}

    definition = make_tool(echo, input_schema=ITEM, verify=lambda **kw: True)
    k = key()
    body = {"operationId": k, "note": SENTINEL}
    assert post(token_client, definition.name, body).status_code == 200
    assert post(token_client, definition.name, body).status_code == 200  # the replay
    assert post(token_client, definition.name, {**body, "operationId": key(), "qty": 2},
                ).status_code == 409
    assert post(token_client, definition.name, {**body, "operationId": key(), "qty": SENTINEL},
                ).status_code == 422
    mcp_call(token_client, definition.name, {**body, "operationId": key()}, {})
    dump = telemetry.dump()
    assert len(telemetry.spans(definition.name)) == 5 and "guarded_tools.calls" in dump
    assert SENTINEL not in dump and k not in dump


# -- gauges -------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_gauges_count_pending_in_flight_abandoned_and_unknown(
    telemetry: Telemetry, token_client: APIClient, make_tool: Any
) -> None:
    seen: list[int] = []

    def running(input: Any, ctx: Any) -> Any:  # collected while its claim is in flight
        seen.append(telemetry.gauge("guarded_tools.operations.in_flight", flying.name))
        return {"ok": True}

    def gives_up(input: Any, ctx: Any) -> Any:
        ctx.operation.write({"charged": "maybe"})
        raise RuntimeError("timeout")

    confirmed = make_tool(confirm="always")
    flying = make_tool(running)
    abandoned = make_tool(gives_up, recover=lambda **kw: {"recovered": False})
    unknown = make_tool(gives_up)
    gauges = {"guarded_tools.confirmations.pending": confirmed,
              "guarded_tools.operations.abandoned": abandoned,
              "guarded_tools.operations.outcome_unknown": unknown}

    def read() -> dict[str, int]:
        return {name: telemetry.gauge(name, tool.name) for name, tool in gauges.items()}

    assert read() == dict.fromkeys(gauges, 0)

    assert post(token_client, confirmed.name, {"operationId": key()}).status_code == 202
    assert post(token_client, flying.name, {"operationId": key()}).status_code == 200
    assert post(token_client, abandoned.name, {"operationId": key()}).status_code == 500
    assert post(token_client, unknown.name, {"operationId": key()}).status_code == 500
    assert Operation.objects.get(tool=abandoned.name).state == OperationState.ABANDONED
    assert read() == dict.fromkeys(gauges, 1)
    assert seen == [1] and telemetry.gauge("guarded_tools.operations.in_flight", flying.name) == 0
    assert telemetry.gauge("guarded_tools.operations.outcome_unknown", abandoned.name) == 0


@pytest.mark.django_db(transaction=True)
def test_gauges_read_in_the_exporters_thread_close_its_connection(
    telemetry: Telemetry, token_client: APIClient, make_tool: Any
) -> None:
    definition = make_tool(confirm="always")
    assert post(token_client, definition.name, {"operationId": key()}).status_code == 202
    seen: dict[str, Any] = {}

    def export() -> None:  # what a periodic reader's thread does
        seen["pending"] = telemetry.gauge("guarded_tools.confirmations.pending", definition.name)
        seen["left_open"] = connections["default"].connection is not None

    thread = threading.Thread(target=export)
    thread.start()
    thread.join(30)
    assert seen == {"pending": 1, "left_open": False}  # CONN_MAX_AGE is 0 in the demo


def test_a_gauge_that_cannot_reach_the_database_reports_nothing(
    telemetry: Telemetry, make_tool: Any, caplog: Any, monkeypatch: Any
) -> None:
    """The database is down while the gauges are read: the collection still succeeds, the
    counters are there, the gauges are not, and the log says which one it could not read.
    (The outage is made explicit: pytest-django's blocker alone depended on what the
    worker's earlier tests had left open.)"""
    from django.db import OperationalError

    from guarded_tools.contrib import otel

    def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("could not connect to server")

    monkeypatch.setattr(otel, "count_by_tool", unreachable)
    definition = make_tool(allow_anonymous=True, read_only=True)
    definition({})  # a read needs no database: its counter is there, the gauges are not
    # The warning is read on the app's logger itself: in a whole run, an earlier test of the
    # worker may have left logging configured so that nothing reaches the root's handler.
    target = logging.getLogger("guarded_tools")
    monkeypatch.setattr(target, "disabled", False)
    target.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING, logger="guarded_tools"):
            assert telemetry.series("guarded_tools.calls", tool=definition.name)
            assert telemetry.points("guarded_tools.operations.outcome_unknown") == []
    finally:
        target.removeHandler(caplog.handler)
    assert "could not read guarded_tools.operations.outcome_unknown" in caplog.text


# -- the demo's Prometheus exposition -----------------------------------------------------------
@pytest.mark.django_db
def test_the_demo_exposes_prometheus_metrics_to_staff_and_its_scraper(
    settings: Any, token_client: APIClient, make_tool: Any, user_factory: Any,
    session_client_for: Callable[[Any], Any],
) -> None:
    pytest.importorskip("opentelemetry.exporter.prometheus")
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS,
                              "OBSERVERS": ["guarded_tools.otel.observe"]}
    definition = make_tool()
    assert post(token_client, definition.name, {"operationId": key()}).status_code == 200
    assert APIClient().get("/metrics").status_code == 401
    assert APIClient().get("/metrics", headers={"Authorization": "Bearer wrong"}
                           ).status_code == 401
    assert token_client.get("/metrics").status_code == 401  # an agent is no scraper
    scraped = APIClient().get("/metrics",
                              headers={"Authorization": f"Bearer {settings.METRICS_TOKEN}"})
    assert scraped.status_code == 200 and scraped["Content-Type"].startswith("text/plain")
    text = scraped.content.decode()
    assert f'tool="{definition.name}"' in text
    for name in ("guarded_tools_calls_total", "guarded_tools_call_duration_seconds_bucket",
                 "guarded_tools_confirmations_pending", "guarded_tools_operations_in_flight",
                 "guarded_tools_operations_abandoned",
                 "guarded_tools_operations_outcome_unknown"):
        assert f"\n{name}{{" in text, name
    staff = session_client_for(user_factory(is_staff=True))
    assert staff.get("/metrics").status_code == 200


# -- the official MCP client sends its trace context in _meta -----------------------------------
@pytest.mark.django_db(transaction=True)
def test_the_official_mcp_client_trace_continues_on_the_server(
    telemetry: Telemetry, live_server: Any, alice: Any, make_tool: Any
) -> None:
    pytest.importorskip("mcp.shared._otel", reason="this mcp release sends no trace context")
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    definition = make_tool()
    token = Token.objects.create(user=alice)
    tracer = telemetry.tracer_provider.get_tracer("agent")
    sent: dict[str, Any] = {}

    async def main() -> None:
        http = httpx2.AsyncClient(headers={"Authorization": f"Token {token.key}"}, timeout=30)
        transport = streamable_http_client(f"{live_server.url}{MCP}", http_client=http)
        async with Client(transport) as client:
            with tracer.start_as_current_span("agent turn") as span:
                sent["span"] = span.get_span_context()
                sent["result"] = await client.call_tool(definition.name, {"operationId": key()})

    anyio.run(main)
    assert sent["result"].is_error is False
    (span,) = telemetry.spans(definition.name)
    assert span.context.trace_id == sent["span"].trace_id
    assert span.parent is not None and span.parent.is_remote
    assert trace.format_span_id(span.parent.span_id) == trace.format_span_id(
        sent["span"].span_id)
