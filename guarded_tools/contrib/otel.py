"""Provides the OpenTelemetry observer: a span per call, call metrics and state gauges.

``GUARDED_TOOLS = {"OBSERVERS": ["guarded_tools.otel.observe"]}`` sends every call to
OpenTelemetry's global providers; build an ``OpenTelemetryObserver`` for others. Needs
``pip install "guarded-tools[otel]"``; the rest of the app never imports OpenTelemetry.
Metadata only, as every observer gets it: never inputs, outputs, messages or details.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics, trace
    from opentelemetry.metrics import CallbackOptions, Observation
    from opentelemetry.trace import SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as exc:  # pragma: no cover - exercised where OpenTelemetry is absent
    raise ImproperlyConfigured(
        "guarded_tools.contrib.otel needs OpenTelemetry: pip install 'guarded-tools[otel]'"
        " (opentelemetry-api, plus the SDK and an exporter to send anything)."
    ) from exc

from guarded_tools.core.version import VERSION

if TYPE_CHECKING:
    from django.db.models import QuerySet
    from opentelemetry.context import Context
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, TracerProvider

    from guarded_tools.pipeline import GuardEvent

logger = logging.getLogger("guarded_tools")

SCOPE = "guarded_tools"
TERMINAL = ("succeeded", "failed", "outcome_unknown")
#: Seconds: from a replay answered from memory to a call that waited for a person.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                    30.0, 60.0)
#: Calls started and not yet finished that one observer keeps (a bound, not a quota).
MAX_OPEN_CALLS = 10_000

_PROPAGATOR = TraceContextTextMapPropagator()


def parent_context(carrier: Mapping[str, str]) -> Context | None:
    """The context a call's span starts in: the caller's trace, when it sent one.

    A valid ``traceparent`` continues the caller's trace, under the caller's span;
    under the current span instead when that is already in the same trace (the site's
    HTTP instrumentation continued the same header). Otherwise None: the current
    context, as for any span.
    """
    if not carrier:
        return None
    remote = trace.get_current_span(_PROPAGATOR.extract(carrier)).get_span_context()
    if not remote.is_valid:
        return None
    current = trace.get_current_span().get_span_context()
    if current.is_valid and current.trace_id == remote.trace_id:
        return None
    return _PROPAGATOR.extract(carrier, context=otel_context.get_current())


@dataclass
class _Call:
    """A call between its ``started`` event and its outcome."""

    span: Span
    token: Any
    started: float
    transport: str
    replayed: bool = False
    recovered: bool = False


# -- gauges: database-wide counts, per tool ----------------------------------------------------
def _pending_confirmations() -> QuerySet[Any]:
    from guarded_tools.models import Confirmation

    return Confirmation.objects.pending()


def _operations_in_flight() -> QuerySet[Any]:
    from django.db.models.functions import Now

    from guarded_tools.models import Operation

    return Operation.objects.in_flight().filter(lease_expires_at__gte=Now())


def _operations_abandoned() -> QuerySet[Any]:
    from guarded_tools.models import Operation

    return Operation.objects.abandoned()


def _operations_unknown() -> QuerySet[Any]:
    from guarded_tools.models import Operation

    return Operation.objects.unknown()


def _confirms(tool: Any) -> bool:
    return bool(tool.confirm_mode)


def _claims(tool: Any) -> bool:
    return bool(tool.idempotent)


#: (name, unit, description, rows, which registered tools report 0 when they have none)
GAUGES: tuple[tuple[str, str, str, Callable[[], QuerySet[Any]], Callable[[Any], bool]], ...] = (
    ("guarded_tools.confirmations.pending", "{confirmation}",
     "Confirmations waiting for a person's decision.", _pending_confirmations, _confirms),
    ("guarded_tools.operations.in_flight", "{operation}",
     "Operations whose owner holds a live lease (the handler may be running).",
     _operations_in_flight, _claims),
    ("guarded_tools.operations.abandoned", "{operation}",
     "Claims with no live owner, waiting for recovery.", _operations_abandoned, _claims),
    ("guarded_tools.operations.outcome_unknown", "{operation}",
     "Operations whose outcome a person must reconcile.", _operations_unknown, _claims),
)


def _in_transaction() -> bool:
    from django.db import connections

    return any(c.in_atomic_block for c in connections.all(initialized_only=True))


def count_by_tool(
    rows: Callable[[], QuerySet[Any]], reports: Callable[[Any], bool]
) -> dict[str, int]:
    """One indexed ``COUNT ... GROUP BY tool``, with 0 for registered tools that have none.

    Runs where the metric reader collects: its own thread for a periodic exporter,
    the scrape's request for a pull exporter. Outside a transaction it drops this
    thread's connections that are unusable or past ``CONN_MAX_AGE`` before and
    after, as any long-running Django thread must; inside one (the scrape runs in a
    request the site wrapped in a transaction) they are not its to close.
    """
    from django.db import close_old_connections
    from django.db.models import Count

    from guarded_tools.core.registry import registry

    own = not _in_transaction()
    if own:
        close_old_connections()
    try:
        found = {
            str(row["tool"]): int(row["n"])
            for row in rows().order_by().values("tool").annotate(n=Count("pk"))
        }
    finally:
        if own:
            close_old_connections()
    counts = {t.name: 0 for t in registry if reports(t)}
    counts.update(found)
    return counts


class OpenTelemetryObserver:
    """An ``OBSERVERS`` entry that turns lifecycle events into telemetry.

    - a span per call, ``guarded_tools.call <tool>``, continuing the caller's trace
      (``traceparent``/``tracestate`` from the HTTP headers or MCP ``params._meta``),
      current while the call runs (the handler's own spans nest under it), with an
      event per stage and the outcome; its status is an error unless it succeeded;
    - ``guarded_tools.calls`` (counter) and ``guarded_tools.call.duration`` (histogram,
      seconds), by tool, transport, outcome, replayed and error code;
    - ``guarded_tools.budget.alerts`` (counter): budget thresholds reached (the event
      ``budget_alert``), by tool, budget, threshold and measure;
    - gauges (``gauges=True``): pending confirmations, operations in flight, abandoned
      and of unknown outcome, by tool, read from the database when metrics are collected.
      They count database-wide: every process reports the same numbers.

    ``continue_traces=False`` starts every span in the current context instead of the
    caller's trace (for a site that does not trust its callers' trace ids).
    """

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        gauges: bool = True,
        continue_traces: bool = True,
    ) -> None:
        self.continue_traces = continue_traces
        self.tracer = trace.get_tracer(SCOPE, VERSION, tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE, VERSION, meter_provider=meter_provider)
        self.calls = meter.create_counter(
            "guarded_tools.calls", unit="{call}",
            description="Tool calls, by tool, transport and outcome.",
        )
        self.duration = meter.create_histogram(
            "guarded_tools.call.duration", unit="s",
            description="How long tool calls took, by tool, transport and outcome.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.budget_alerts = meter.create_counter(
            "guarded_tools.budget.alerts", unit="{alert}",
            description="Budget thresholds reached, once per window and principal each, by"
                        " tool, budget and threshold.",
        )
        if gauges:
            for name, unit, description, rows, reports in GAUGES:
                meter.create_observable_gauge(
                    name, callbacks=[self._gauge(name, rows, reports)], unit=unit,
                    description=description,
                )
        self._open: dict[tuple[str, str], _Call] = {}
        self._lock = threading.Lock()

    # -- events --------------------------------------------------------------------------
    def __call__(self, event: GuardEvent) -> None:
        if event.stage == "budget_alert":
            self.budget_alerts.add(1, {
                "tool": event.tool, "budget": str(event.extra.get("budget", "")),
                "threshold": int(event.extra.get("threshold", 0)),
                "measure": str(event.extra.get("measure", ""))})
        if event.stage == "started":
            self._start(event)
            return
        key = (event.tool, event.invocation_id)
        with self._lock:
            call = self._open.pop(key, None) if event.stage in TERMINAL else self._open.get(key)
        if call is None:  # a stage outside a call (the sweep's recovery): no span to add to
            return
        call.replayed = call.replayed or event.replayed or event.stage == "replayed"
        call.recovered = call.recovered or event.recovered or event.stage == "recovered"
        if event.stage in TERMINAL:
            self._finish(call, event)
        else:
            call.span.add_event(event.stage, attributes=_numbers(event.extra))

    def _start(self, event: GuardEvent) -> None:
        parent = parent_context(event.trace) if self.continue_traces else None
        span = self.tracer.start_span(
            f"guarded_tools.call {event.tool}",
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": event.tool,
                "guarded_tools.tool": event.tool,
                "guarded_tools.transport": event.transport,
                "guarded_tools.invocation_id": event.invocation_id,
            },
        )
        span.add_event("started")
        call = _Call(span=span, token=None, started=time.perf_counter(),
                     transport=event.transport)
        with self._lock:
            while len(self._open) >= MAX_OPEN_CALLS:  # never finished: drop the oldest
                self._open.pop(next(iter(self._open))).span.end()
            self._open[(event.tool, event.invocation_id)] = call
        # Last: nothing after it can fail and leave the context attached.
        call.token = otel_context.attach(trace.set_span_in_context(span, parent))

    def _finish(self, call: _Call, event: GuardEvent) -> None:
        otel_context.detach(call.token)  # the call's own context, attached at "started"
        outcome, span = event.stage, call.span
        span.add_event(outcome)
        attributes: dict[str, Any] = {
            "guarded_tools.outcome": outcome,
            "guarded_tools.replayed": call.replayed,
            "guarded_tools.recovered": call.recovered,
        }
        if event.operation_id:
            attributes["guarded_tools.operation_id"] = event.operation_id
        if event.code:
            attributes["guarded_tools.error_code"] = event.code
            attributes["error.type"] = event.code
        span.set_attributes(attributes)
        if outcome != "succeeded":
            span.set_status(Status(StatusCode.ERROR, event.code or outcome))
        span.end()
        labels = {
            "tool": event.tool,
            "transport": call.transport,
            "outcome": outcome,
            "replayed": "true" if call.replayed else "false",
        }
        if event.code:
            labels["code"] = event.code
        self.calls.add(1, labels)
        self.duration.record(time.perf_counter() - call.started, labels)

    # -- gauges --------------------------------------------------------------------------
    def _gauge(
        self, name: str, rows: Callable[[], QuerySet[Any]], reports: Callable[[Any], bool]
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def callback(options: CallbackOptions) -> Iterable[Observation]:
            try:
                counts = count_by_tool(rows, reports)
            except Exception:  # the exporter's thread must survive a database outage
                logger.warning("guarded_tools.contrib.otel: could not read %s", name, exc_info=True)
                return []
            return [Observation(n, {"tool": tool}) for tool, n in sorted(counts.items())]

        return callback


def _numbers(extra: Mapping[str, Any]) -> dict[str, int | float | bool]:
    """An event's metadata that is a number (sizes, budgets); nothing else is sent."""
    return {k: v for k, v in extra.items() if isinstance(v, (int, float, bool))}


_default: OpenTelemetryObserver | None = None
_default_lock = threading.Lock()


def get_observer() -> OpenTelemetryObserver:
    """The observer on OpenTelemetry's global providers, made once per process.

    Call it where the site sets up OpenTelemetry to register the gauges before the
    first call (``observe`` makes it otherwise).
    """
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = OpenTelemetryObserver()
    return _default


def observe(event: GuardEvent) -> None:
    """The ``OBSERVERS`` entry ``"guarded_tools.otel.observe"``: the global providers."""
    get_observer()(event)
