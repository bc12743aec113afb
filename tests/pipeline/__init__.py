"""Tests of guarded_tools.pipeline: stages, confirmations, policies, recovery."""
