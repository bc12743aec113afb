"""ASGI entry point uvicorn serves during the peer benchmarks: the app's own, as documented.

``guarded_tools.asgi.with_cancellation`` around Django's ASGI handler (docs, async
handlers), with the bench settings: the tool endpoints cross into a thread once per call.
"""

import os

from django.core.asgi import get_asgi_application

from guarded_tools.asgi import with_cancellation

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
application = with_cancellation(get_asgi_application())
