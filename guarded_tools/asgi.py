"""Django's ASGI application with client disconnects reaching the handlers.

Defined in ``guarded_tools.transports.asgi``.
"""

from guarded_tools.transports.asgi import with_cancellation

__all__ = ["with_cancellation"]
