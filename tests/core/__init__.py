"""Tests of guarded_tools.core: errors, the catalog, repairs, JSON Schema, definitions."""
