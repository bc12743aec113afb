"""OAuth 2.1 for the tool endpoints, with django-oauth-toolkit.

Defined in ``guarded_tools.contrib.oauth``.
"""

from guarded_tools.contrib.oauth import (
    OAuthCredentials,
    ResourceServerAuthentication,
    ScopeStage,
    scope_per_app,
    scope_per_tool,
    validate_resource,
)

__all__ = [
    "OAuthCredentials",
    "ResourceServerAuthentication",
    "ScopeStage",
    "scope_per_app",
    "scope_per_tool",
    "validate_resource",
]
