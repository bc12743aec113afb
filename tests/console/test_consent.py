"""The owner-consent page: a decision needs the user's step-up, not only their session.

Issue 25, item 1: a browser agent holds the user's session and its CSRF token, so the page
must ask for something it cannot supply (the password by default, ``CONSENT_STEP_UP``).
Item 13: decision pages refuse framing themselves, without ``XFrameOptionsMiddleware``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings
from django.core.cache import cache
from django.core.checks import run_checks
from django.core.exceptions import ValidationError
from django.test import Client as DjangoClient
from django.test import override_settings
from django.utils.safestring import mark_safe

from guarded_tools.models import AuditEntry, Confirmation, ConfirmationStatus, Operation
from tests.conftest import Effects, key
from tests.transports.mcp_calls import ITEM

pytestmark = pytest.mark.django_db

CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


@pytest.fixture(autouse=True)
def _no_failures_counted() -> Iterator[None]:
    cache.clear()  # failed step-ups are counted in the cache, per user
    yield
    cache.clear()


@pytest.fixture
def owner_tool(make_tool: Any) -> tuple[Any, Effects]:
    handler = Effects()
    return make_tool(handler, confirm="owner", input_schema=ITEM,
                     description="Orders the items for you."), handler


@pytest.fixture
def caller(request: Any, alice: Any, client_for: Callable[[Any], Any],
           session_client_for: Callable[[Any], Any]) -> Any:
    """The agent: with a token, or in the user's own browser session (session + CSRF)."""
    return session_client_for(alice) if request.param == "session" else client_for(alice)


def _ask(caller: Any, definition: Any, body: dict[str, Any]) -> str:
    asked = caller.post(f"/agent/tools/{definition.name}/", body, format="json")
    assert asked.status_code == 202, asked.content
    return str(asked.json()["error"]["confirmation"]["url"]).split("testserver", 1)[-1]


def _browser_of(user: Any) -> DjangoClient:
    """The user's browser session, as a browser agent drives it (CSRF enforced)."""
    browser = DjangoClient(enforce_csrf_checks=True)
    assert browser.login(username=user.get_username(), password="pw")
    return browser


def _token(browser: DjangoClient, page: str) -> str:
    shown = browser.get(page)
    assert shown.status_code == 200
    found = CSRF.search(shown.content.decode())
    assert found is not None
    return found.group(1)


@pytest.mark.parametrize("caller", ["session", "token"], indirect=True)
def test_the_session_alone_decides_nothing_the_password_does(
        caller: Any, alice: Any, owner_tool: tuple[Any, Effects]) -> None:
    definition, handler = owner_tool
    body = {"operationId": key(), "qty": 2}
    page = _ask(caller, definition, body)
    browser = _browser_of(alice)
    token = _token(browser, page)
    assert 'type="password"' in browser.get(page).content.decode()
    for decision in ("approve", "decline"):
        # What an agent in the session can send: the session cookie and the page's token.
        refused = browser.post(page, {"decision": decision, "csrfmiddlewaretoken": token})
        assert refused.status_code == 403
        assert "Type your password" in refused.content.decode()
        wrong = browser.post(page, {"decision": decision, "csrfmiddlewaretoken": token,
                                    "password": "guess"})
        assert wrong.status_code == 403 and "not right" in wrong.content.decode()
    confirmation = Confirmation.objects.get()
    assert confirmation.status == ConfirmationStatus.PENDING and not AuditEntry.objects.exists()
    again = caller.post(f"/agent/tools/{definition.name}/", body, format="json")
    assert again.status_code == 202 and handler.count == 0  # nothing ran
    # The user types their password: the decision stands, and says how they were verified.
    decided = browser.post(page, {"decision": "approve", "csrfmiddlewaretoken": token,
                                  "password": "pw", "reason": "yes, mine"})
    assert decided.status_code == 302
    audit = AuditEntry.objects.get()
    assert audit.action == AuditEntry.Action.APPROVE and audit.actor == alice
    assert audit.data["verified_by"] == "password"
    from django.contrib.admin.models import LogEntry

    assert "verified by password" in LogEntry.objects.get().change_message
    done = caller.post(f"/agent/tools/{definition.name}/", body, format="json")
    assert done.status_code == 200 and handler.count == 1


def test_failed_step_ups_are_limited_and_are_not_decisions(
        alice: Any, client_for: Callable[[Any], Any], owner_tool: tuple[Any, Effects]) -> None:
    definition, _handler = owner_tool
    page = _ask(client_for(alice), definition, {"operationId": key(), "qty": 1})
    browser = _browser_of(alice)
    token = _token(browser, page)
    with override_settings(GUARDED_TOOLS={"CONSENT_STEP_UP_FAILURES": 3}):
        for _attempt in range(3):
            answer = browser.post(page, {"decision": "approve", "csrfmiddlewaretoken": token,
                                         "password": "guess"})
            assert answer.status_code == 403
        # Locked out now: even the right password is not checked until the window passes.
        locked = browser.post(page, {"decision": "approve", "csrfmiddlewaretoken": token,
                                     "password": "pw"})
        assert locked.status_code == 429 and "Too many failed attempts" in locked.content.decode()
    assert Confirmation.objects.get().status == ConfirmationStatus.PENDING
    assert not AuditEntry.objects.exists()


class OneTimeCode:
    """A site's step-up: a code from somewhere the agent cannot read (here a constant)."""

    def render(self, request: Any, confirmation: Any) -> str:
        return mark_safe('<input name="code" data-testid="code">')

    def verify(self, request: Any, confirmation: Any) -> str:
        if request.POST.get("code") != "424242":
            raise ValidationError("Wrong code.")
        return "one-time code"


def test_a_site_plugs_in_its_own_step_up(alice: Any, client_for: Callable[[Any], Any],
                                         owner_tool: tuple[Any, Effects]) -> None:
    definition, _handler = owner_tool
    page = _ask(client_for(alice), definition, {"operationId": key(), "qty": 1})
    browser = _browser_of(alice)
    with override_settings(GUARDED_TOOLS={"CONSENT_STEP_UP": f"{__name__}.OneTimeCode"}):
        token = _token(browser, page)
        assert 'data-testid="code"' in browser.get(page).content.decode()
        password = browser.post(page, {"decision": "decline", "csrfmiddlewaretoken": token,
                                       "password": "pw"})
        assert password.status_code == 403 and "Wrong code." in password.content.decode()
        decided = browser.post(page, {"decision": "decline", "csrfmiddlewaretoken": token,
                                      "code": "424242"})
        assert decided.status_code == 302
    audit = AuditEntry.objects.get()
    assert audit.action == AuditEntry.Action.DECLINE
    assert audit.data["verified_by"] == "one-time code"


def test_check_refuses_a_step_up_without_the_interface() -> None:
    with override_settings(GUARDED_TOOLS={"CONSENT_STEP_UP": "builtins.object"}):
        assert "guarded_tools.E012" in {m.id for m in run_checks()}
    with override_settings(GUARDED_TOOLS={"CONSENT_STEP_UP": "no.such.StepUp"}):
        assert "guarded_tools.E012" in {m.id for m in run_checks()}
    assert "guarded_tools.E012" not in {m.id for m in run_checks()}


# -- item 13: framing ---------------------------------------------------------------------------
WITHOUT_XFRAME = [m for m in settings.MIDDLEWARE if not m.endswith("XFrameOptionsMiddleware")]


@override_settings(MIDDLEWARE=WITHOUT_XFRAME)
def test_the_consent_page_refuses_framing_without_the_middleware(
        alice: Any, client_for: Callable[[Any], Any], owner_tool: tuple[Any, Effects]) -> None:
    definition, _handler = owner_tool
    page = _ask(client_for(alice), definition, {"operationId": key(), "qty": 1})
    assert DjangoClient().get(page)["X-Frame-Options"] == "DENY"  # the login redirect too
    browser = _browser_of(alice)
    token = _token(browser, page)
    assert browser.get(page)["X-Frame-Options"] == "DENY"
    refused = browser.post(page, {"decision": "approve", "csrfmiddlewaretoken": token})
    assert refused["X-Frame-Options"] == "DENY"
    decided = browser.post(page, {"decision": "approve", "csrfmiddlewaretoken": token,
                                  "password": "pw"})
    assert decided.status_code == 302 and decided["X-Frame-Options"] == "DENY"


@override_settings(MIDDLEWARE=WITHOUT_XFRAME)
def test_the_admins_decision_pages_refuse_framing_without_the_middleware(
        alice: Any, client_for: Callable[[Any], Any], make_tool: Any, django_user_model: Any,
        session_client_for: Callable[[Any], Any]) -> None:
    definition = make_tool(confirm="effect-only", input_schema=ITEM)
    asked = client_for(alice).post(f"/agent/tools/{definition.name}/",
                                   {"operationId": key(), "qty": 1}, format="json")
    assert asked.status_code == 202
    confirmation = Confirmation.objects.get()
    operation = Operation.objects.create(tool=definition.name, scope=f"user:{alice.pk}",
                                         key=key(), fingerprint="f", state="outcome_unknown",
                                         user=alice)
    staff = session_client_for(django_user_model.objects.create_superuser("boss",
                                                                           password="pw"))
    base = "/admin/guarded_tools/"
    pages = {
        "confirmation list": staff.get(f"{base}confirmation/"),
        "confirmation page": staff.get(f"{base}confirmation/{confirmation.pk}/change/"),
        "decline form": staff.post(f"{base}confirmation/", {
            "action": "decline_selected", "_selected_action": [str(confirmation.pk)]}),
        "decide": staff.post(f"{base}confirmation/{confirmation.pk}/decide/",
                             {"decision": "approve"}),
        "operation list": staff.get(f"{base}operation/"),
        "operation page": staff.get(f"{base}operation/{operation.pk}/change/"),
        "reconcile form": staff.post(f"{base}operation/", {
            "action": "mark_not_executed", "_selected_action": [str(operation.pk)]}),
    }
    for name, response in pages.items():
        assert response.status_code in (200, 302), (name, response.status_code)
        assert response.get("X-Frame-Options") == "DENY", name
    assert "Reason" in pages["decline form"].content.decode()
    assert Confirmation.objects.get().status == ConfirmationStatus.APPROVED


# -- issue 28 item 13: the page is written for the user ---------------------------------------
def _real_token_client(user: Any) -> Any:
    """An agent with the user's DRF token (a real credential, as the page names it)."""
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


def _oauth_client(user: Any, settings: Any) -> Any:
    """An agent with an OAuth access token of the application "Budget helper"."""
    import secrets
    from datetime import timedelta

    from django.utils import timezone
    from oauth2_provider.models import get_access_token_model, get_application_model

    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "OAUTH_PROTECTS": ["mcp"]}
    application = get_application_model().objects.create(
        name="Budget helper", client_type="public", redirect_uris="http://127.0.0.1:1/cb",
        authorization_grant_type="authorization-code", client_secret="")
    value = secrets.token_urlsafe(24)
    get_access_token_model().objects.create(
        user=user, application=application, token=value, scope="demo:read demo:write",
        expires=timezone.now() + timedelta(hours=1), resource=["http://testserver/agent/mcp"])
    return DjangoClient(headers={"Authorization": f"Bearer {value}"})


def _ask_over_mcp(client: Any, definition: Any, body: dict[str, Any]) -> str:
    from tests.transports.mcp_rpc import call

    asked = call(client, definition.name, body)
    assert asked.status_code == 200, asked.content
    error = asked.json()["result"]["_meta"]["io.github.guarded-tools/error"]
    return str(error["confirmation"]["url"]).split("testserver", 1)[-1]


def _ask_with(client: Any, definition: Any, body: dict[str, Any]) -> str:
    import json

    asked = client.post(f"/agent/tools/{definition.name}/", json.dumps(body),
                        content_type="application/json")
    assert asked.status_code == 202, asked.content
    return str(asked.json()["error"]["confirmation"]["url"]).split("testserver", 1)[-1]


WHO = {"session": "A program using your signed-in session",
       "token": "An agent using your API token",
       "oauth": "Budget helper, an application you authorized"}


@pytest.mark.parametrize("how", ["session", "token", "oauth"])
def test_the_consent_page_says_who_asks_what_happens_until_when_and_its_state_after(
        how: str, alice: Any, owner_tool: tuple[Any, Effects], settings: Any,
        session_client_for: Callable[[Any], Any]) -> None:
    from guarded_tools.console.formatting import when

    definition, handler = owner_tool
    agent = {"session": lambda: session_client_for(alice),
             "token": lambda: _real_token_client(alice),
             "oauth": lambda: _oauth_client(alice, settings)}[how]()
    body = {"operationId": "mv-1", "qty": 2}
    ask = {"session": _ask, "token": _ask_with, "oauth": _ask_over_mcp}[how]
    page = ask(agent, definition, body)
    browser = _browser_of(alice)
    shown = browser.get(page).content.decode()
    confirmation = Confirmation.objects.get()
    title = definition.annotations["title"]
    assert f'data-testid="subject">{WHO[how]} asks to run “{title}” for you<' in shown
    assert f'data-testid="who-asks">{WHO[how]}<' in shown
    # Until when, with its zone, as every other page says a time.
    assert f"You can decide until {when(confirmation.expires_at)}" in shown
    assert when(confirmation.expires_at).endswith("UTC") and "lapses in" not in shown
    # The schema's titles only: no key field, no camelCase names.
    assert ">Quantity<" in shown and 'data-testid="field-qty">2<' in shown
    assert "mv-1" not in shown and "operationId" not in shown and ">qty<" not in shown
    decided = browser.post(page, {"decision": "approve", "password": "pw",
                                  "csrfmiddlewaretoken": _token(browser, page)})
    assert decided.status_code == 302
    after = browser.get(decided["Location"]).content.decode()
    confirmation.refresh_from_db()
    assert f'data-testid="subject">You approved “{title}”<' in after
    assert (f'data-testid="status">You approved this request (alice,'
            f" {when(confirmation.decided_at)}).<") in after
    assert "when your agent asks again, it runs once" in after
    assert "asks to run" not in after and "You can decide until" not in after
    assert handler.count == 0  # nothing ran until the agent asks again


def test_after_declining_the_page_says_so_and_that_nothing_runs(
        alice: Any, client_for: Callable[[Any], Any], owner_tool: tuple[Any, Effects]) -> None:
    from guarded_tools.console.formatting import when

    definition, _ = owner_tool
    page = _ask(client_for(alice), definition, {"operationId": key(), "qty": 1})
    browser = _browser_of(alice)
    browser.post(page, {"decision": "decline", "password": "pw", "reason": "not today",
                        "csrfmiddlewaretoken": _token(browser, page)})
    after = browser.get(page).content.decode()
    confirmation = Confirmation.objects.get()
    assert f"You declined this request (alice, {when(confirmation.decided_at)})." in after
    assert "Nothing ran, and nothing will" in after and "not today" in after
    assert "asks to run" not in after
