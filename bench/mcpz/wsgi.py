"""WSGI entry point gunicorn serves for the django-mcpz peer (one sync worker)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.mcpz.settings")
application = get_wsgi_application()
