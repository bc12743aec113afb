"""System checks: settings, databases and every registered tool."""

from __future__ import annotations

from typing import Any

import pytest

from guarded_tools.checks import (
    check_databases,
    check_isolation,
    check_published_routes,
    check_settings,
    check_tools,
)
from tests.conftest import one_transaction


def ids(messages: list[Any]) -> list[str]:
    return [m.id for m in messages]


def sites_databases(monkeypatch: Any, databases: dict[str, Any]) -> None:
    """The checks see ``databases`` as a site's ``DATABASES``, and their connections
    (never opened) as that site's ``django.db.connections``."""
    from types import SimpleNamespace

    from django.db.utils import ConnectionHandler

    monkeypatch.setattr("guarded_tools.checks.settings", SimpleNamespace(DATABASES=databases))
    monkeypatch.setattr("guarded_tools.checks.connections", ConnectionHandler(databases))


def test_the_demo_site_passes_every_check() -> None:
    assert check_settings() == [] and check_tools() == [] and check_databases() == []
    assert check_isolation() == [] and check_published_routes() == []


def test_unknown_and_invalid_settings(settings: Any) -> None:
    settings.GUARDED_TOOLS = {"LEASE_SECONDZ": 5, "LEASE_SECONDS": -1}
    assert ids(check_settings()) == ["guarded_tools.E001", "guarded_tools.E002"]
    settings.GUARDED_TOOLS = ["not", "a", "dict"]
    assert ids(check_settings()) == ["guarded_tools.E001"]
    settings.GUARDED_TOOLS = {"CONFIRMATION_APPROVAL_TTL_SECONDS": 0}
    assert ids(check_settings()) == ["guarded_tools.E002"]


def test_a_removed_setting_is_accepted_and_warned_of(settings: Any) -> None:
    """PREPARED_STATEMENTS no longer does anything: a site naming it still starts (no E001),
    and a warning says it is ignored, and why."""
    settings.GUARDED_TOOLS = {"PREPARED_STATEMENTS": False}
    messages = check_settings()
    assert ids(messages) == ["guarded_tools.W006"]
    assert "PREPARED_STATEMENTS" in messages[0].msg and "ignored" in messages[0].msg


def test_atomic_requests_and_sqlite_mode(monkeypatch: Any) -> None:
    databases = {
        "default": {"ENGINE": "django.db.backends.postgresql", "ATOMIC_REQUESTS": True},
        "other": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
        "waits": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:",
                  "OPTIONS": {"transaction_mode": "IMMEDIATE"}},
    }
    sites_databases(monkeypatch, databases)
    found = [(m.id, m.msg.split("'")[1]) for m in check_databases()]
    assert found == [("guarded_tools.W001", "default"), ("guarded_tools.W002", "other")]


def test_tool_checks(make_tool: Any) -> None:
    make_tool(input_schema={"type": "array"}, idempotency_key=None)
    make_tool(permissions=["demo.fly_order"])
    make_tool(input_schema={"type": "object", "properties": {}})  # key field undeclared
    make_tool(journal=False)
    found = ids(check_tools())
    for code in ("E003", "E004", "E005", "W003"):
        assert f"guarded_tools.{code}" in found
    assert all(m.hint for m in check_tools())


def test_invalid_schema_is_refused_at_registration(make_tool: Any) -> None:
    with pytest.raises(ValueError, match="invalid JSON Schema"):
        make_tool(input_schema={"type": "object", "properties": {"a": {"type": "nope"}}})


@pytest.mark.parametrize(("level", "warned"), [(None, False), (2, False), (3, True), (4, True)],
                         ids=["default", "read-committed", "repeatable-read", "serializable"])
def test_atomic_tools_above_read_committed_are_told_they_claim_first(
    level: int | None, warned: bool, make_tool: Any, monkeypatch: Any, settings: Any
) -> None:
    from django.db.backends.postgresql.psycopg_any import IsolationLevel

    options = {} if level is None else {"isolation_level": IsolationLevel(level)}
    databases = {"default": {"ENGINE": "django.db.backends.postgresql", "OPTIONS": options}}
    sites_databases(monkeypatch, databases)
    make_tool(atomic=True)
    assert ids(check_isolation()) == (["guarded_tools.W005"] if warned else [])
    one_transaction(settings, False)  # atomic tools claim first anyway: nothing to say
    assert check_isolation() == [] and check_published_routes() == []


def test_the_host_approvers_emails_link_to_is_named_and_absolute(settings: Any) -> None:
    """Issue 25, item 14: an email's link is absolute, on the host ``CONSOLE_BASE_URL``
    names; without it the site is warned (the emails carry no link), and a base that
    cannot start a link is an error."""
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    from guarded_tools.checks import check_links

    settings.GUARDED_TOOLS = {"CONSOLE_BASE_URL": "https://ops.example.com/"}
    assert check_links() == []
    settings.GUARDED_TOOLS = {}
    assert ids(check_links()) == ["guarded_tools.W013"]
    settings.GUARDED_TOOLS = {"CONFIRMATION_NOTIFY_EMAIL": False}
    assert check_links() == []  # no emails, no links
    for base in ("ops.example.com", "/admin", "https://", "javascript:alert(1)",
                 "https://ops.example.com/?next=x", "https://user@ops.example.com"):
        settings.GUARDED_TOOLS = {"CONSOLE_BASE_URL": base}
        assert ids(check_links()) == ["guarded_tools.E013"], base
    with pytest.raises(SystemCheckError, match=r"guarded_tools\.E013"):
        call_command("check")


@pytest.mark.parametrize("refuse", [True, False])
def test_a_published_route_that_takes_agent_tokens_is_warned_of(refuse: bool) -> None:
    """W014: a published viewset whose own route accepts the tool endpoints' token
    authentication without RefuseAgentCredentials (the opt-out); sessions only is fine."""
    from rest_framework.authentication import SessionAuthentication
    from rest_framework.permissions import IsAuthenticated

    from guarded_tools import registry
    from guarded_tools.viewsets import guarded_viewset
    from project.demo.api import OrderViewSet

    class TokenOrders(OrderViewSet):
        permission_classes = [IsAuthenticated]

    class SessionOrders(OrderViewSet):
        permission_classes = [IsAuthenticated]
        authentication_classes = [SessionAuthentication]

    made = [*guarded_viewset(TokenOrders, basename="tokenorders", actions={"list": {}},
                             refuse_agent_credentials=refuse).values(),
            *guarded_viewset(SessionOrders, basename="sessionorders", actions={"list": {}},
                             refuse_agent_credentials=False).values()]
    try:
        messages = check_published_routes()
    finally:
        for definition in made:
            registry.unregister(definition.name)
    if refuse:
        assert messages == []
        return
    assert ids(messages) == ["guarded_tools.W014"] and messages[0].obj is TokenOrders
    assert "tokenorders_list" in messages[0].msg and "TokenAuthentication" in messages[0].msg
    assert "RefuseAgentCredentials" in messages[0].hint


def test_agent_authentication_can_be_named(settings: Any) -> None:
    """AGENT_AUTHENTICATION_CLASSES narrows what counts as an agent's: here nothing the
    demo's viewset takes, so its route is not refused and no check warns."""
    settings.GUARDED_TOOLS = {
        **settings.GUARDED_TOOLS,
        "AGENT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.BasicAuthentication"],
    }
    assert check_settings() == [] and check_published_routes() == []


def test_the_checks_read_the_settings_through_the_settings_object() -> None:
    """Only ``check_settings`` reads values from the ``GUARDED_TOOLS`` dict itself (it
    judges them as the site wrote them); every other check reads them through
    ``gt_settings``, as the rest of the app does."""
    import inspect
    import re

    from guarded_tools import checks
    from guarded_tools.conf import DEFAULTS

    source = inspect.getsource(checks).replace(inspect.getsource(checks.check_settings), "")
    read = re.findall(r"""\.get\(\s*["'](\w+)["']""", source)
    assert [name for name in read if name in DEFAULTS] == []
