"""Settings for the benchmarks: the demo site plus the bench app and django-idempotency-key.

Used by ``bench/run.py`` (gunicorn and every helper process). DEBUG is off: with it
on, Django keeps every query in memory and the figures would measure that.
"""

from __future__ import annotations

import os

from bench.switches import store_for
from project.settings import *  # noqa: F403
from project.settings import DATABASES, GUARDED_TOOLS, INSTALLED_APPS, LOGGING

INSTALLED_APPS = [*INSTALLED_APPS, "bench", "idempotency_key"]
ROOT_URLCONF = "bench.urls"
WSGI_APPLICATION = "bench.wsgi.application"
DEBUG = False

# Reference E (django-idempotency-key): its CacheKeyStorage over two Django caches.
# "idempotency" is the database cache, in the same database as everything else and
# shared by the gunicorn workers (what a site without Redis would configure); entries
# are kept a day and never culled, as guarded_tools keeps its operations.
# "default" is Django's default local-memory cache: per process, not shared between
# the workers, so it is shown only as the package's lower bound (E-mem).
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                "TIMEOUT": 86400, "OPTIONS": {"MAX_ENTRIES": 10_000_000}},
    "idempotency": {
        "BACKEND": "django.core.cache.backends.db.DatabaseCache",
        "LOCATION": "bench_idempotency_cache",
        "TIMEOUT": 86400,
        "OPTIONS": {"MAX_ENTRIES": 1_000_000_000},
    },
}
IDEMPOTENCY_KEY = {
    "STORAGE": {"CLASS": "idempotency_key.storage.CacheKeyStorage", "CACHE_NAME": "idempotency"},
    "CONFLICT_STATUS_CODE": None,  # a replay answers with the stored status (200)
}

#: The stub service the realistic handler calls (started by bench/run.py).
BENCH_STUB_URL = os.environ.get("BENCH_STUB_URL", "http://127.0.0.1:8765/")

LOGGING = {**LOGGING, "loggers": {"guarded_tools": {"handlers": ["console"], "level": "ERROR"}}}

#: The ablation (``bench/run.py --ablation``): each server of a variant runs with some of
#: the speed-ups off, named in ``BENCH_ABLATE``: "perm" (Django's ModelBackend instead of
#: guarded_tools.auth_backends.OneQueryModelBackend, below), "multi" (several statements
#: per execute), "ssb" (psycopg's server-side binding, with its automatic preparation of
#: statements) and "orm" (the ORM's store, no PostgreSQL backend). "multi" and "orm" choose
#: ``STORE_CLASS`` (``bench.stores``). (The run in bench/NOTEBOOK.md also had "begin" and
#: "prepare", removed from the store after it.)
BENCH_ABLATE = frozenset(filter(None, os.environ.get("BENCH_ABLATE", "").split(",")))
if "perm" in BENCH_ABLATE:  # Django's own backend instead of the one-query one
    AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.ModelBackend"]
GUARDED_TOOLS = {**GUARDED_TOOLS, "STORE_CLASS": store_for(BENCH_ABLATE)}
if "ssb" in BENCH_ABLATE and DATABASES["default"]["ENGINE"].endswith("postgresql"):
    DATABASES["default"]["OPTIONS"] = {**DATABASES["default"].get("OPTIONS", {}),
                                       "server_side_binding": True}
