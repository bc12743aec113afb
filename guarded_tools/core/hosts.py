"""Provides which hosts the site owns: the Origins MCP trusts, the Host links may name.

A request's own ``Host`` proves nothing when ``ALLOWED_HOSTS`` accepts any name: under
DNS rebinding an attacker's page reaches the site under the attacker's name, so its
Origin equals its Host. Only names the site configured count, and the loopback names
only for a request that came over loopback to a loopback name.
"""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.urls import NoReverseMatch, reverse

from guarded_tools.conf import gt_settings

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def _hostname(netloc: str) -> str:
    """``Example.com.:8000`` → ``example.com``; ``[::1]:80`` → ``::1``; ``""`` if invalid."""
    try:
        name = urlsplit(f"//{netloc}").hostname or ""
    except ValueError:
        return ""
    return name.removesuffix(".")


def configured_hosts() -> frozenset[str]:
    """``ALLOWED_HOSTS`` entries that name one host: not ``*``, not a ``.domain`` pattern."""
    return frozenset(
        _hostname(host) for host in settings.ALLOWED_HOSTS
        if host and "*" not in host and not host.startswith(".")
    ) - {""}


def over_loopback(request: Any) -> bool:
    """The connection came from a loopback address (so it arrived on one)."""
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool((mapped or address).is_loopback)


def _trusted(name: str, request: Any) -> bool:
    if name in configured_hosts():
        return True
    return name in LOOPBACK_NAMES and over_loopback(request) and _request_host(request) in (
        LOOPBACK_NAMES
    )


def _request_host(request: Any) -> str:
    try:
        return _hostname(request.get_host())
    except DisallowedHost:
        return ""


def owns_host(request: Any) -> bool:
    """The request's ``Host`` is one the site configured (or loopback, reached over it)."""
    name = _request_host(request)
    return bool(name) and _trusted(name, request)


DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(url: str) -> tuple[str, str, int] | None:
    """``url``'s origin (scheme, host, port), the default port filled in; None unless it is
    an http(s) origin alone (no path, no query, no credentials)."""
    try:
        parts = urlsplit(url.strip().lower().rstrip("/"))
        port = parts.port or DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        return None
    name = (parts.hostname or "").removesuffix(".")
    if (port is None or not name or parts.path or parts.query or parts.fragment
            or "@" in parts.netloc):
        return None
    return parts.scheme, name, port


def _own_origin(request: Any) -> tuple[str, str, int] | None:
    """``request.scheme://request.get_host()``, as CSRF compares it, when the site owns
    that Host (a Host under ``ALLOWED_HOSTS = ["*"]`` proves nothing)."""
    if not owns_host(request):
        return None
    return _origin(f"{request.scheme}://{request.get_host()}")


def _same_domain(origin: tuple[str, str, int], pattern: str) -> bool:
    """``origin`` is under a ``CSRF_TRUSTED_ORIGINS`` wildcard such as
    ``https://*.example.com`` (the domain itself included, as Django's CSRF has it)."""
    scheme, _, rest = pattern.strip().lower().partition("://*.")
    domain = _origin(f"{scheme}://{rest}")
    if domain is None or domain[0] != origin[0] or domain[2] != origin[2]:
        return False
    return origin[1] == domain[1] or origin[1].endswith(f".{domain[1]}")


def trusted_origins() -> tuple[list[str], list[str]]:
    """The origins the site names: ``MCP_ALLOWED_ORIGINS`` and ``CSRF_TRUSTED_ORIGINS``,
    split into exact origins and ``scheme://*.domain`` wildcards."""
    named = [*gt_settings.MCP_ALLOWED_ORIGINS, *settings.CSRF_TRUSTED_ORIGINS]
    return ([str(o) for o in named if "*" not in str(o)],
            [str(o) for o in named if "://*." in str(o)])


def origin_allowed(request: Any, origin: str) -> bool:
    """A browser ``Origin`` the site trusts, compared whole (scheme, host and port) as
    Django's ``CsrfViewMiddleware`` does: the request's own origin on a Host the site owns,
    or one ``MCP_ALLOWED_ORIGINS`` or ``CSRF_TRUSTED_ORIGINS`` names (wildcards too)."""
    seen = _origin(origin)
    if seen is None:
        return False
    if seen == _own_origin(request):
        return True
    exact, wildcards = trusted_origins()
    return seen in {_origin(o) for o in exact} or any(_same_domain(seen, w) for w in wildcards)


def app_path(request: Any, name: str, *args: Any, **kwargs: Any) -> str:
    """The path of this app's route ``name``, in the URL namespace the request came in by
    (an app mounted twice links within its own mount), else the default one.

    Raises ``NoReverseMatch`` when neither has it.
    """
    match = getattr(request, "resolver_match", None)
    namespace = match.namespace if match is not None and match.namespace else "guarded_tools"
    try:
        return reverse(f"{namespace}:{name}", args=args or None, kwargs=kwargs or None)
    except NoReverseMatch:
        if namespace == "guarded_tools":
            raise
        return reverse(f"guarded_tools:{name}", args=args or None, kwargs=kwargs or None)


def absolute_url(request: Any, path: str) -> str:
    """``path`` on this site: absolute for a Host the site owns, else left relative,
    so that a link never names a host the request chose."""
    return str(request.build_absolute_uri(path)) if owns_host(request) else path


def base_url_problem(base: Any) -> str | None:
    """Why ``base`` cannot start an absolute link (``CONSOLE_BASE_URL``), or None."""
    try:
        parts = urlsplit(str(base))
    except ValueError:
        return "it is not a URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "it is not an absolute http(s) URL with a host, such as https://ops.example.com"
    if parts.query or parts.fragment or "@" in parts.netloc:
        return "it has a query, a fragment or credentials"
    return None


def site_url(path: str) -> str | None:
    """``path`` on the site as ``CONSOLE_BASE_URL`` names it (for links read away from any
    request, as in emails), or None when the site names no base: never a relative link,
    never a Host some request chose."""
    base = gt_settings.CONSOLE_BASE_URL
    if not base or base_url_problem(base) is not None:
        return None
    return str(base).rstrip("/") + path
