"""Provides the DRF permission that keeps agent credentials out of a site's own views.

A viewset published with ``guarded_viewset`` keeps its own route (``/api/orders/``), which
runs no guard: no key, no confirmation, no journal. The agent's credentials must open the
tool endpoints only. *Agent credentials* are what those endpoints accept besides a browser
session: a request whose DRF authenticator is one of :func:`agent_authentication` (the
tool endpoints' ``DEFAULT_AUTHENTICATION_CLASSES`` without ``SessionAuthentication``, or
``AGENT_AUTHENTICATION_CLASSES`` where the site names them), or an OAuth access token whose
audience is this site's MCP resource (where ``OAUTH_PROTECTS`` is set).

:class:`RefuseAgentCredentials` refuses such a request with a 403 that names the tool to
call instead; the request the guard itself builds for a published action (marked by
:func:`mark_guarded`) passes. ``guarded_viewset`` puts it first in the permission classes
of every viewset it publishes unless told ``refuse_agent_credentials=False``, and check
``guarded_tools.W013`` warns of a published viewset whose route accepts agent credentials
without it.
"""

from __future__ import annotations

from typing import Any, cast

from django.urls import NoReverseMatch
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.settings import api_settings

from guarded_tools.conf import gt_settings, installed
from guarded_tools.core import hosts
from guarded_tools.core.registry import registry

__all__ = ["RefuseAgentCredentials"]

#: The attribute the guard sets on the request it builds for a published view.
GUARDED_CALL = "guarded_call"


def mark_guarded(request: Any) -> None:
    """Mark ``request`` (built by the guard, never by a client) as a guarded call."""
    setattr(request, GUARDED_CALL, True)


def is_guarded(request: Any) -> bool:
    """Whether ``request`` is the guard's own call of a published view."""
    return getattr(request, GUARDED_CALL, False) is True


def oauth_classes() -> tuple[type, ...]:
    """DOT's DRF authentication, where DOT is installed and the tool endpoints take its tokens."""
    if not (gt_settings.OAUTH_PROTECTS and installed("oauth2_provider")):
        return ()
    from oauth2_provider.contrib.rest_framework import OAuth2Authentication

    return (OAuth2Authentication,)


def agent_authentication() -> tuple[type, ...]:
    """The DRF authentication classes whose credentials are agents' (OAuth aside).

    ``AGENT_AUTHENTICATION_CLASSES`` where the site names them; otherwise what the tool
    endpoints accept (``DEFAULT_AUTHENTICATION_CLASSES``) except sessions, which are people
    in their browser, and DOT's OAuth classes, whose tokens are agents' only when they are
    bound to the MCP resource (:func:`bound_to_tools`).
    """
    named = gt_settings.AGENT_AUTHENTICATION_CLASSES
    if named is not None:
        return tuple(named)
    oauth = oauth_classes()
    defaults = cast("list[type]", api_settings.DEFAULT_AUTHENTICATION_CLASSES)  # imported
    return tuple(
        cls for cls in defaults
        if not issubclass(cls, SessionAuthentication) and not (oauth and issubclass(cls, oauth))
    )


def bound_to_tools(request: Any) -> bool:
    """The request's OAuth access token was issued for this site's MCP resource."""
    if not oauth_classes():
        return False
    from oauth2_provider.models import get_access_token_model

    from guarded_tools.contrib import oauth

    token = getattr(request, "auth", None)
    return isinstance(token, get_access_token_model()) and oauth.audience_allows(
        token, oauth.resource_identifier(request))


def is_agent_credential(request: Any) -> bool:
    """Whether the DRF ``request`` authenticated with an agent's credentials."""
    authenticator = getattr(request, "successful_authenticator", None)
    if authenticator is None:
        return False
    return isinstance(authenticator, agent_authentication()) or bound_to_tools(request)


def accepts_agent_credentials(view_class: type) -> list[str]:
    """The names of ``view_class``'s authentication classes that take agent credentials."""
    agents = agent_authentication() + oauth_classes()
    return [cls.__name__ for cls in getattr(view_class, "authentication_classes", ())
            if isinstance(cls, type) and agents and issubclass(cls, agents)]


def tool_for(view: Any) -> str | None:
    """The tool that publishes ``view``'s action, if one does."""
    cls, action = type(view), getattr(view, "action", None)
    for definition in registry:
        if getattr(definition, "published_action", None) == (cls, action):
            return definition.name
    return None


def _path(request: Any, route: str, *args: str) -> str | None:
    try:
        return hosts.app_path(request, route, *args)
    except NoReverseMatch:
        return None


def refusal_message(request: Any, view: Any) -> str:
    """What the agent reads: this route is not for it, and the tool to call instead."""
    name = tool_for(view)
    if name is not None:
        where = _path(request, "tool-call", name)
        instead = f"call the tool {name}" + (f" (POST {where}, or over MCP)" if where else "")
    else:
        where = _path(request, "tool-list")
        instead = "call one of the site's tools" + (f" (listed at GET {where})" if where else "")
    return (f"This route does not accept agent credentials: {instead}, where every call"
            " is guarded.")


class RefuseAgentCredentials(BasePermission):
    """Refuse agent credentials on a site's own view (403); people and the guard pass.

    Put it first in ``permission_classes`` of a view that agents must reach only through
    the tool endpoints; ``guarded_viewset`` does so for the viewsets it publishes.
    """

    message = "This route does not accept agent credentials."

    def has_permission(self, request: Any, view: Any) -> bool:
        if is_guarded(request) or not is_agent_credential(request):
            return True
        self.message = refusal_message(request, view)
        return False
