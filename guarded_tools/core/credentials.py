"""Provides the kinds of credential a call comes with: their scopes, and what a waiting call
records to re-check when its approval runs.

Each kind of credential is a :class:`CredentialKind` in this registry, consulted in
order: the DRF token kind is here, the OAuth kind
(``guarded_tools.contrib.oauth.OAuthCredentials``) is registered first by the app config
where django-oauth-toolkit is installed. A kind may check the scopes its credential
grants (``check_scopes``), on every call and every read of a call's state (the
authorization stage asks :func:`check_scopes`). A call that waits for a person's decision
records what it authenticated with (``Confirmation.credential``); the approved run
re-checks that it still stands. So the pipeline reaches the OAuth integration through
this registry, never by importing it.
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

from django.apps import apps

from guarded_tools.core.errors import AuthorizationError
from guarded_tools.core.repair import Repair

__all__ = [
    "DRF_TOKEN",
    "CredentialKind",
    "CredentialRevoked",
    "DrfTokenCredentials",
    "check_scopes",
    "kinds",
    "live",
    "reference",
    "register",
    "unregister",
]

#: ``Confirmation.credential`` for a DRF token: a digest, never the token's key itself.
DRF_TOKEN = "drf-token:"


class CredentialRevoked(AuthorizationError):
    """The requester's credential was revoked or deleted, or the user deactivated, while
    the call waited: the approved run refuses it, and nothing runs."""

    def __init__(self) -> None:
        super().__init__(
            "The credential this call was requested with was revoked or deleted, or its user"
            " deactivated, before the approved call ran; nothing ran.",
            repair=Repair(action="ask_user", instruction="Ask the user to sign in again (or"
                          " authorize this connection again), then make the call anew."),
        )


class CredentialKind(Protocol):
    """One kind of credential: what to record of it, and whether a record still stands."""

    #: The prefixes of the references this kind records (``Confirmation.credential``).
    prefixes: tuple[str, ...]

    def reference(self, auth: Any) -> str | None:
        """What to record of ``auth`` (DRF's ``request.auth``); None for another kind."""

    def live(self, reference: str, user: Any) -> Any:
        """The credential ``reference`` names, still standing for ``user`` (None when the
        kind has nothing to hand on), or ``CredentialRevoked``."""

    # A kind may also define ``check_scopes(tool, request, credential)``: refuse a call
    # (raise a ``GuardError``) whose credential lacks a scope the tool needs.


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class DrfTokenCredentials:
    """DRF's ``authtoken``: a digest of the key, standing while the user has that token."""

    prefixes: tuple[str, ...] = (DRF_TOKEN,)

    def reference(self, auth: Any) -> str | None:
        if not apps.is_installed("rest_framework.authtoken"):
            return None
        from rest_framework.authtoken.models import Token

        return DRF_TOKEN + _digest(auth.key) if isinstance(auth, Token) else None

    def live(self, reference: str, user: Any) -> Any:
        from rest_framework.authtoken.models import Token

        keys = Token.objects.filter(user=user).values_list("key", flat=True)
        if user is None or not any(_digest(k) == reference[len(DRF_TOKEN):] for k in keys):
            raise CredentialRevoked()
        return None


_kinds: list[CredentialKind] = [DrfTokenCredentials()]


def kinds() -> tuple[CredentialKind, ...]:
    """The registered kinds, in the order they are consulted."""
    return tuple(_kinds)


def register(kind: CredentialKind, *, first: bool = False) -> None:
    """Add ``kind`` (last, or ``first``); a kind of the same class is not added twice."""
    if any(type(known) is type(kind) for known in _kinds):
        return
    _kinds.insert(0 if first else len(_kinds), kind)


def unregister(kind: CredentialKind) -> None:
    """Remove the registered kind of ``kind``'s class, if there is one."""
    _kinds[:] = [known for known in _kinds if type(known) is not type(kind)]


def reference(auth: Any) -> str:
    """What to record of ``auth``: the first kind's reference; blank for none."""
    if auth is None:
        return ""
    for kind in _kinds:
        recorded = kind.reference(auth)
        if recorded is not None:
            return recorded
    return ""


def live(recorded: str, user: Any) -> Any:
    """The credential ``recorded`` names, re-checked by its kind, or ``CredentialRevoked``
    (also for a reference no registered kind reads)."""
    for kind in _kinds:
        if recorded.startswith(kind.prefixes):
            return kind.live(recorded, user)
    raise CredentialRevoked()


def check_scopes(tool: Any, request: Any, credential: Any = None) -> None:
    """Ask every kind that checks scopes whether the call's credential (the request's, or
    ``credential`` for a call with no request) grants what ``tool`` needs; a kind refuses
    by raising. Nothing to check for a call with neither."""
    if request is None and credential is None:
        return
    for kind in _kinds:
        check = getattr(kind, "check_scopes", None)
        if check is not None:
            check(tool, request, credential)
