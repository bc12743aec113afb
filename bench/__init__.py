"""The benchmark suite (``make bench``): a small Django app and its runner.

Registered only by ``bench.settings``; the reusable app never depends on it.
"""
