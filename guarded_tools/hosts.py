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


def origin_allowed(request: Any, origin: str) -> bool:
    """A browser ``Origin`` the site trusts: ``MCP_ALLOWED_ORIGINS``, a configured host's,
    or a loopback one for a loopback server."""
    origin = origin.strip().rstrip("/").lower()
    if origin in {o.rstrip("/").lower() for o in gt_settings.MCP_ALLOWED_ORIGINS}:
        return True
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or parts.path or parts.query or parts.fragment:
        return False
    name = _hostname(parts.netloc)
    return bool(name) and _trusted(name, request)


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
