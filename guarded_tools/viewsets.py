"""A site's own DRF views and viewsets published as guarded tools.

Defined in ``guarded_tools.tools.sources.viewsets``.
"""

from guarded_tools.tools.sources.viewsets import guarded_view, guarded_viewset

__all__ = ["guarded_view", "guarded_viewset"]
