"""Optional integrations, independent of each other: OAuth, OpenTelemetry."""
