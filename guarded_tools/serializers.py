"""DRF serializers as tool schemas: their components for drf-spectacular.

Defined in ``guarded_tools.tools.sources.serializers``.
"""

from guarded_tools.tools.sources.serializers import spectacular_components

__all__ = ["spectacular_components"]
