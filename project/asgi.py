"""ASGI entry point of the demo site (uvicorn project.asgi:application)."""

import os

from django.core.asgi import get_asgi_application

from guarded_tools.asgi import with_cancellation

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
application = with_cancellation(get_asgi_application())
