"""Provides this package's version, read by the root package and by what announces it.

The servers and instruments that name the version (MCP's ``serverInfo``, the OpenTelemetry
scope) read it here, so that no module of the package imports the package root.
"""

VERSION = "0.1.0"
