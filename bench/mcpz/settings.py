"""Settings of the django-mcpz peer: the demo site's, with the peer's URLconf.

``project.settings`` as the app's bench settings start from it: the same Django
middleware (Security, Session, Common, Csrf, Authentication, Message, XFrameOptions),
the same database settings (the peer's tool sends no statement), DEBUG off. The
package's per-call log record (``django_mcpz.calls``, INFO) is kept below the level
that is written, as the app's own loggers are in ``bench.settings``.
"""

from __future__ import annotations

from project.settings import *  # noqa: F403
from project.settings import LOGGING

ROOT_URLCONF = "bench.mcpz.urls"
WSGI_APPLICATION = "bench.mcpz.wsgi.application"
DEBUG = False
LOGGING = {**LOGGING, "loggers": {**LOGGING["loggers"],
                                  "django_mcpz": {"handlers": ["console"], "level": "ERROR"}}}
