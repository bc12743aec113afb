"""Tests of guarded_tools.pipeline: stages, policies, budgets, recovery."""
