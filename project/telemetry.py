"""Provides the demo's telemetry: OpenTelemetry metrics exposed for Prometheus at ``/metrics``."""

from __future__ import annotations

import hmac
import threading

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

_configured = False
_lock = threading.Lock()


def configure() -> None:
    """Once per process: the global meter provider, read by Prometheus's registry.

    Then the app's observer (``guarded_tools.otel.observe``, on the global providers)
    registers its gauges, so a scrape shows them before the first call. Traces go to
    whatever tracer provider the site sets up (none in the demo).
    """
    global _configured
    with _lock:
        if _configured:
            return
        from opentelemetry import metrics
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.resources import Resource

        from guarded_tools.otel import get_observer

        resource = Resource.create({"service.name": "guarded-tools-demo"})
        metrics.set_meter_provider(
            MeterProvider(metric_readers=[PrometheusMetricReader()], resource=resource)
        )
        get_observer()
        _configured = True


def _allowed(request: HttpRequest) -> bool:
    """Staff in their session, or a scraper with ``Authorization: Bearer METRICS_TOKEN``."""
    if getattr(request.user, "is_staff", False):
        return True
    token = getattr(settings, "METRICS_TOKEN", "")
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return bool(token) and scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.encode()
    )


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The Prometheus text exposition of this process's metrics."""
    if not _allowed(request):
        response = HttpResponse("Log in as staff, or send Authorization: Bearer <token>.\n",
                                status=401, content_type="text/plain; charset=utf-8")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    configure()
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
