"""Tests of guarded_tools.confirmations: the approvals queue, its requests and settings."""
