"""Tests of guarded_tools.store and guarded_tools.models: claims, backends, history."""
