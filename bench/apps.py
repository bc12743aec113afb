"""Provides the bench app's config."""

from django.apps import AppConfig
from django.conf import settings


class BenchConfig(AppConfig):
    name = "bench"
    label = "bench"
    verbose_name = "Benchmarks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Turn off the speed-ups an ablation server measures without (``BENCH_ABLATE``)."""
        ablate = set(getattr(settings, "BENCH_ABLATE", ()))
        if ablate:
            from guarded_tools.pipeline import permissions

            permissions._ABLATE.update(ablate)  # the store's: STORE_CLASS (bench.stores)
