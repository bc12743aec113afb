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
from tests.test_mcp_tasks import ITEM

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
