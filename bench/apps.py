"""Provides the bench app's config."""

from django.apps import AppConfig


class BenchConfig(AppConfig):
    """The bench's tools and models; its ablations are chosen by settings alone
    (``BENCH_ABLATE`` in ``bench/settings.py``: ``STORE_CLASS``, ``AUTHENTICATION_BACKENDS``)."""

    name = "bench"
    label = "bench"
    verbose_name = "Benchmarks"
    default_auto_field = "django.db.models.BigAutoField"
