"""ASGI entry point uvicorn serves for the django-mcpz peer: Django's ASGI handler as is.

django-mcpz's view is synchronous: Django's handler runs it (and the middleware) in a
thread per request, as it does for any synchronous view.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.mcpz.settings")
application = get_asgi_application()
