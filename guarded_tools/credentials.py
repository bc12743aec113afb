"""The kinds of credential a waiting call records, re-checked when its approval runs.

Defined in ``guarded_tools.core.credentials``; a site registers its own kind here.
"""

from guarded_tools.core.credentials import (
    CredentialKind,
    CredentialRevoked,
    DrfTokenCredentials,
    kinds,
    register,
    unregister,
)

__all__ = [
    "CredentialKind",
    "CredentialRevoked",
    "DrfTokenCredentials",
    "kinds",
    "register",
    "unregister",
]
