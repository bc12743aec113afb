"""Tests of guarded_tools.tools: tool classes, sources (serializers, Pydantic, viewsets)."""
