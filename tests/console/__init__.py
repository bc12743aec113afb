"""Tests of guarded_tools.console: the admin's pages and actions, the consent page."""
