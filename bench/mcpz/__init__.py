"""The Django-native peer of the peer table (``bench/peer.py``): django-mcpz.

A second Django site beside the app's: ``bench.mcpz.settings`` is ``project.settings``
(the same Django, the same seven middleware, the same database settings) with its own
URLconf, where a django-mcpz ``MCPServer`` serves ``echo(value: int)`` at ``/mcp/`` as a
plain synchronous Django view: gunicorn serves ``bench.mcpz.wsgi`` (sync worker),
uvicorn ``bench.mcpz.asgi`` (Django's ASGI handler, which runs the view in a thread).
"""
