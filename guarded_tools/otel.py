"""OpenTelemetry traces and metrics of every call.

Defined in ``guarded_tools.contrib.otel``.
"""

from guarded_tools.contrib.otel import OpenTelemetryObserver, get_observer, observe

__all__ = ["OpenTelemetryObserver", "get_observer", "observe"]
