"""Provides the OAuth resource-server glue on django-oauth-toolkit: challenge, audience, scopes.

django-oauth-toolkit (DOT, ``guarded-tools[oauth]``) is the authorization server: it issues
and revokes tokens, enforces PKCE, registers clients (RFC 7591 and Client ID Metadata
Documents) and serves the RFC 8414 and RFC 9728 metadata documents. This module is only
what a resource server adds on top: the ``WWW-Authenticate`` challenge that points at the
MCP resource's metadata, the audience check (a token minted for another resource never
works here), and the OAuth scopes a tool needs, checked on every call and used to filter
the tool list; and the grant a call was requested with, which the run an approval starts
re-checks. Only :mod:`guarded_tools.transports.rest.views`,
:mod:`guarded_tools.transports.mcp.server`,
:mod:`guarded_tools.permissions` import it, and only where DOT is an
installed app; the pipeline never does: the scope check and the grant a waiting call was
requested with are ``OAuthCredentials``, which ``GuardedToolsConfig.ready()`` registers
first among :mod:`guarded_tools.core.credentials`' kinds where DOT is installed, and the
authorization stage asks those kinds on every call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from django.apps import apps
from django.core.signals import setting_changed
from django.urls import NoReverseMatch
from oauth2_provider.contrib.rest_framework import (
    OAuth2Authentication,
    OAuth2ProtectedResourceAuthentication,
)
from oauth2_provider.models import get_access_token_model, get_refresh_token_model
from oauth2_provider.oauth2_validators import validate_resource_as_url_prefix
from oauth2_provider.www_authenticate import build_bearer_challenge
from rest_framework.authentication import get_authorization_header

from guarded_tools.conf import gt_settings, installed
from guarded_tools.core import hosts
from guarded_tools.core.credentials import CredentialRevoked
from guarded_tools.core.definition import Tool
from guarded_tools.core.errors import AuthorizationError
from guarded_tools.core.repair import Repair
from guarded_tools.pipeline.stages import Call, Stage

#: Where RFC 9728 puts a resource's metadata: this, then the resource URL's path.
WELL_KNOWN = "/.well-known/oauth-protected-resource"


# -- the resource ---------------------------------------------------------------------------
def _mcp_path(request: Any) -> str | None:
    try:
        return hosts.app_path(request, "mcp")
    except NoReverseMatch:
        return None


def resource_identifier(request: Any) -> str | None:
    """This MCP server's resource identifier (RFC 8707/9728): the MCP URL, no trailing slash.

    ``OAUTH_RESOURCE`` when the site names it (behind a proxy, say); else the MCP
    endpoint's URL on this request's Host, but only a Host the site owns
    (:func:`guarded_tools.core.hosts.absolute_url`): None otherwise, and no token matches
    None.
    """
    if gt_settings.OAUTH_RESOURCE:
        return str(gt_settings.OAUTH_RESOURCE).rstrip("/")
    path = _mcp_path(request)
    if path is None:
        return None
    url = hosts.absolute_url(request, path)
    return url.rstrip("/") if "://" in url else None


def metadata_url(request: Any) -> str | None:
    """The RFC 9728 URL of the resource's metadata: the well-known path, then the resource's."""
    resource = resource_identifier(request)
    if resource is None:
        return None
    parts = urlsplit(resource)
    return f"{parts.scheme}://{parts.netloc}{WELL_KNOWN}{parts.path}"


def _canonical(uri: str) -> tuple[str, str, str, str]:
    """A resource URI as RFC 8707 compares it: scheme and host in any case, no final slash."""
    parts = urlsplit(uri)
    return parts.scheme.lower(), parts.netloc.lower(), parts.path.rstrip("/"), parts.query


def _same(a: str, b: str) -> bool:
    try:
        return _canonical(a) == _canonical(b)
    except ValueError:
        return False


def audience_allows(token: Any, resource: str | None) -> bool:
    """The token names this resource in its audience (its RFC 8707 ``resource`` list).

    Stricter than DOT's default, where a token with no resource indicator is good for any
    resource: the MCP spec requires the token to have been issued for this server, so an
    unbound token is refused too.
    """
    audiences = getattr(token, "resource", None) or []
    return resource is not None and any(isinstance(a, str) and _same(a, resource)
                                        for a in audiences)


def validate_resource(request_uri: str, audiences: list[str]) -> bool:
    """DOT's ``RESOURCE_SERVER_TOKEN_RESOURCE_VALIDATOR`` for a site that protects REST too.

    DOT's own check (the request URL under one of the token's resources) and, besides it,
    a token for this site's MCP resource (``…/mcp``) on the tool routes beside it
    (``…/tools/…``, ``…/operations/…``, ``…/confirmations/…``: a call, and the polls of
    its state and of its approval). Which resource a token is for is still decided by
    :class:`ResourceServerAuthentication`.
    """
    if validate_resource_as_url_prefix(request_uri, audiences):
        return True
    for audience in audiences:
        base = audience.rstrip("/")
        if base.endswith("/mcp"):
            root = base[: -len("mcp")]
            if any(request_uri.startswith(root + route)
                   for route in ("tools", "operations", "confirmations")):
                return True
    return False


# -- authentication ---------------------------------------------------------------------------
class ResourceServerAuthentication(OAuth2ProtectedResourceAuthentication):
    """DOT's DRF bearer authentication, bound to this MCP resource.

    A token DOT accepts (known, unexpired, unrevoked) still authenticates nobody unless its
    audience is this resource: a token minted for another server answers 401 like a
    missing one. The 401 challenge names the resource's metadata document (RFC 9728).
    Only the ``Authorization: Bearer`` header carries a token, as the MCP authorization
    spec requires and the metadata says (``bearer_methods_supported: ["header"]``): an
    ``access_token`` in the query string or a form body, which DOT would read, is no
    token at all (it would end up in logs, histories and ``Referer`` headers).
    Tokens are never forwarded anywhere.
    """

    def get_resource_metadata_url(self, request: Any) -> str | None:
        return metadata_url(request)

    def authenticate(self, request: Any) -> tuple[Any, Any] | None:
        if not from_header(request):
            return None
        result = super().authenticate(request)
        if result is None:
            return None
        if not audience_allows(result[1], resource_identifier(request)):
            request.oauth2_error = {
                "error": "invalid_token",
                "error_description": "The access token is not valid for this resource.",
            }
            return None
        return result

    def authenticate_header(self, request: Any) -> str:
        """``Bearer [error=…,] [scope=…,] resource_metadata=…``.

        ``scope`` is ``OAUTH_CHALLENGE_SCOPES`` when the site names some: least privilege
        (a host starts with those and steps up on a tool's ``insufficient_scope``).
        """
        challenge = dict(getattr(request, "oauth2_error", {}) or {})
        if gt_settings.OAUTH_CHALLENGE_SCOPES:
            challenge["scope"] = " ".join(gt_settings.OAUTH_CHALLENGE_SCOPES)
        return str(build_bearer_challenge(
            request, oauth2_error=challenge, resource_metadata_url=metadata_url(request),
        ))


def from_header(request: Any) -> bool:
    """The request carries a bearer token in its ``Authorization`` header (RFC 6750 §2.1)."""
    scheme, _, credentials = get_authorization_header(request).partition(b" ")
    return scheme.lower() == b"bearer" and bool(credentials.strip())


def protects(surface: str) -> bool:
    """Whether OAuth bearer tokens are accepted on ``surface`` (``"mcp"`` or ``"rest"``)."""
    return surface in gt_settings.OAUTH_PROTECTS


def authenticators(surface: str, site: list[Any]) -> list[Any]:
    """The site's authentication ``site`` for ``surface``, ours first where it is protected.

    DOT's own DRF classes are dropped there: after ours they would accept the very token
    ours refused for its audience.
    """
    if not protects(surface):
        return site
    others = [a for a in site if not isinstance(a, OAuth2Authentication)]
    return [ResourceServerAuthentication(), *others]


# -- scopes -----------------------------------------------------------------------------------
def scope_per_tool(definition: Tool) -> tuple[str, ...]:
    """``OAUTH_DEFAULT_SCOPES`` mapping: one scope per tool, ``tools:<name>``."""
    return (f"tools:{definition.name}",)


def scope_per_app(definition: Tool) -> tuple[str, ...]:
    """``OAUTH_DEFAULT_SCOPES`` mapping: ``<app_label>:read`` for reads, else ``:write``.

    The app is the installed app whose package declares the tool (:attr:`Tool.module`:
    the handler's module, a published viewset's or view's), however its schema was
    derived; none, no scope.
    """
    config = apps.get_containing_app_config(definition.module)
    if config is None:
        return ()
    return (f"{config.label}:{'read' if definition.read_only else 'write'}",)


def required_scopes(definition: Tool) -> tuple[str, ...]:
    """The tool's own ``scopes=``, else what ``OAUTH_DEFAULT_SCOPES`` maps it to, else none."""
    if definition.scopes:
        return definition.scopes
    mapping: Callable[[Tool], Iterable[str]] | None = gt_settings.OAUTH_DEFAULT_SCOPES
    return tuple(mapping(definition)) if mapping is not None else ()


@functools.cache
def _access_token_model() -> type[Any]:
    """DOT's access token model, looked up once (again after a DOT setting changes): every
    call authenticated with a token asks whether it is one."""
    return get_access_token_model()  # type: ignore[no-any-return]


def _forget_access_token_model(*, setting: str, **kwargs: Any) -> None:
    if setting.startswith("OAUTH2_PROVIDER"):
        _access_token_model.cache_clear()


setting_changed.connect(_forget_access_token_model)


def token_scopes(request: Any) -> frozenset[str] | None:
    """The scopes of the DOT access token the request authenticated with; None without one."""
    return token_scopes_of(getattr(request, "auth", None))


def allows(definition: Tool, request: Any) -> bool:
    """The request's token (if it has one) carries every scope the tool needs."""
    granted = token_scopes(request)
    return granted is None or granted.issuperset(required_scopes(definition))


class InsufficientScope(AuthorizationError):
    """A valid token without a scope the tool needs: 403, with the step-up challenge."""

    def __init__(self, missing: Iterable[str], *, challenge: str) -> None:
        names = " ".join(sorted(missing))
        super().__init__(
            f"The access token lacks the OAuth scope this tool needs: {names}.",
            repair=Repair(
                action="ask_user",
                instruction=f"Ask the user to authorize this connection again with the scope"
                f" {names} (an MCP host does this when it reads the 403's insufficient_scope"
                " challenge), then repeat the call.",
            ),
            details={"missing_scopes": sorted(missing)},
            headers={"WWW-Authenticate": challenge},
        )


def check_scopes(definition: Tool, request: Any, token: Any = None) -> None:
    """Refuse a call whose OAuth token lacks one of the tool's scopes (every call, replays too).

    ``token``: the call's access token when there is no request (a run an approval
    started); its refusal carries no challenge, there being no client to answer.
    """
    granted = token_scopes(request) if token is None else token_scopes_of(token)
    if granted is None:
        return
    needed = required_scopes(definition)
    missing = [s for s in needed if s not in granted]
    if missing:
        wanted = " ".join(sorted(granted | set(needed)))  # a step-up keeps what was granted
        challenge = "" if request is None else str(build_bearer_challenge(
            request,
            oauth2_error={"error": "insufficient_scope", "scope": wanted},
            resource_metadata_url=metadata_url(request),
        ))
        raise InsufficientScope(missing, challenge=challenge)


class ScopeStage(Stage):
    """The stage that refuses a call whose OAuth token lacks one of the tool's scopes.

    Not needed in a stage list: the authorization stage asks the credential kinds, this
    module's ``OAuthCredentials`` among them, on every call. Kept for lists that name it.
    """

    name = "oauth_scopes"
    stateless = True

    def before_claim(self, call: Call) -> None:
        inv = call.inv
        if (inv.request is not None or inv.credential is not None) and installed(
                "oauth2_provider"):
            check_scopes(call.tool, inv.request, inv.credential)

    on_read = before_claim


def token_scopes_of(token: Any) -> frozenset[str] | None:
    """The scopes of ``token`` when it is a DOT access token; None otherwise."""
    if not isinstance(token, _access_token_model()):
        return None
    return frozenset((token.scope or "").split())


# -- the credential an approved call was requested with ------------------------------------------
#: ``Confirmation.credential`` prefixes: the grant (its refresh tokens' family, which a
#: refresh keeps), or the access token itself when it has no refresh token.
GRANT, TOKEN = "oauth-grant:", "oauth-token:"


def credential_reference(token: Any) -> str | None:
    """What to record of the access token a call was requested with; None for no DOT token."""
    if not isinstance(token, _access_token_model()):
        return None
    refresh = get_refresh_token_model().objects.filter(access_token=token).first()
    if refresh is not None and refresh.token_family:
        return f"{GRANT}{refresh.token_family}"
    return f"{TOKEN}{token.pk}"


def live_token(reference: str) -> Any:
    """The access token ``reference`` names while its grant stands, else None.

    A grant stands while a refresh token of its family is unrevoked (revoking the grant,
    or the user's revocation, revokes them all); its newest access token is the one
    whose scopes count. A token without a refresh token stands while it exists unexpired.
    """
    tokens = get_access_token_model().objects
    if reference.startswith(GRANT):
        family = reference[len(GRANT):]
        return tokens.filter(refresh_token__token_family=family,
                             refresh_token__revoked__isnull=True).order_by("-created").first()
    if reference.startswith(TOKEN):
        token = tokens.filter(pk=reference[len(TOKEN):]).first()
        return token if token is not None and not token.is_expired() else None
    return None


class OAuthCredentials:
    """DOT's access tokens as a kind of credential (:mod:`guarded_tools.credentials`):
    the grant a waiting call was requested with, standing while it does for the same user."""

    prefixes: tuple[str, ...] = (GRANT, TOKEN)

    def reference(self, auth: Any) -> str | None:
        return credential_reference(auth) if installed("oauth2_provider") else None

    def check_scopes(self, tool: Tool, request: Any, credential: Any = None) -> None:
        """Refuse a call whose OAuth token lacks one of the tool's scopes (nothing to
        check for a call authenticated with no token, ``request.auth`` None)."""
        if credential is None and getattr(request, "auth", None) is None:
            return
        if installed("oauth2_provider"):
            check_scopes(tool, request, credential)

    def live(self, reference: str, user: Any) -> Any:
        token = live_token(reference) if installed("oauth2_provider") else None
        if token is None or token.user_id != getattr(user, "pk", None):
            raise CredentialRevoked()
        return token
