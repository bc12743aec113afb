"""What an agent reads when a call waits for a person, or its input has several faults:
over REST (a token and a session) and over MCP with the official client.

- A request that waits for a person is asked about again at a person's pace
  (``CONFIRMATION_RETRY_AFTER_SECONDS``), not at the guard's own poll of ``Prefer: wait``.
- Over MCP the structured error of a tool with an output schema travels only in ``_meta``:
  the text says which request waits, until when, and how many approvals it has and needs.
- Under an approval policy, ``why`` says what is true of a policy (some calls run at once).
- Every invalid field is in ``repair.fields``, a missing one included.
"""

from __future__ import annotations

import uuid
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from guarded_tools import Approvers, Policy, Rule
from guarded_tools.models import Confirmation
from project.demo.management.commands.demo_seed import AGENT_TOKEN
from tests.conftest import key

MCP_2 = __import__("importlib.metadata").metadata.version("mcp").startswith("2")
needs_mcp_2 = pytest.mark.skipif(not MCP_2, reason="the official client's 2.x API")
ERROR_META = "io.github.guarded-tools/error"
OUTPUT = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def rest_clients(user: Any, session_client_for: Any) -> dict[str, Any]:
    token = APIClient()
    token.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return {"token": token, "session": session_client_for(user)}


# -- the pace of asking again -----------------------------------------------------------------
@pytest.mark.django_db
@pytest.mark.parametrize("transport", ["token", "session"])
def test_a_request_waiting_for_a_person_is_asked_about_at_a_persons_pace(
        transport: str, alice: Any, make_tool: Any, session_client_for: Any,
        settings: Any) -> None:
    definition = make_tool(confirm="always")
    client = rest_clients(alice, session_client_for)[transport]
    pending = client.post(f"/agent/tools/{definition.name}/", {"operationId": key()},
                          format="json")
    assert pending.status_code == 202
    assert pending["Retry-After"] == "30"  # tens of seconds by default, not the 1 of a poll
    # Its own setting: the guard's poll of Prefer: wait does not move it.
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "CONFIRMATION_POLL_INTERVAL": 0.2,
                              "CONFIRMATION_RETRY_AFTER_SECONDS": 45}
    again = client.post(f"/agent/tools/{definition.name}/", {"operationId": key()},
                        format="json")
    assert again.status_code == 202 and again["Retry-After"] == "45"


def test_the_pace_is_checked_as_a_positive_integer(settings: Any) -> None:
    from guarded_tools.checks import check_settings

    for wrong in (0, -5, 2.5, "30"):
        settings.GUARDED_TOOLS = {"CONFIRMATION_RETRY_AFTER_SECONDS": wrong}
        errors = [m for m in check_settings() if m.id == "guarded_tools.E002"]
        assert [m.msg for m in errors] == [
            "GUARDED_TOOLS['CONFIRMATION_RETRY_AFTER_SECONDS'] must be a positive integer."]
    settings.GUARDED_TOOLS = {"CONFIRMATION_RETRY_AFTER_SECONDS": 60}
    assert not [m for m in check_settings() if m.id == "guarded_tools.E002"]


# -- the demo's payments over REST ----------------------------------------------------------
@pytest.fixture
def demo() -> dict[str, Any]:
    """The seeded demo: the agent's accounts, and a fresh authorization of its source."""
    call_command("demo_seed", stdout=StringIO())
    from django.contrib.auth import get_user_model

    agent = get_user_model().objects.get(username="agent")
    agent.set_password("pw")  # the session fixture's password
    agent.save()
    return {"agent": agent}


def payment(client: Any, amount: str) -> dict[str, Any]:
    def call(tool: str, body: dict[str, Any]) -> Any:
        return client.post(f"/agent/tools/{tool}/", body, format="json")

    source, receiver = call("list_payment_accounts", {}).json()["output"]["accounts"]
    authorization = call("prepare_payment_authorization", {
        "requestId": str(uuid.uuid4()), "sourceId": source["id"]}).json()["output"]
    return {"operationId": str(uuid.uuid4()), "sourceId": source["id"],
            "receiverId": receiver["id"], "amount": amount, **authorization}


POLICY_WHY = ("This tool's approval policy decides call by call whether a call runs at once or"
              " waits for approval; its rule \"up to 1,000.00\" makes this call wait for one"
              " staff member's approval in the site's admin. Nothing has run yet.")


@pytest.mark.django_db
@pytest.mark.parametrize("transport", ["token", "session"])
def test_over_rest_a_policy_says_why_in_words_true_of_a_policy_and_lists_every_bad_field(
        transport: str, demo: dict[str, Any], session_client_for: Any) -> None:
    client = rest_clients(demo["agent"], session_client_for)[transport]
    body = payment(client, "500.00")
    pending = client.post("/agent/tools/send_payment/", body, format="json")
    assert pending.status_code == 202
    error = pending.json()["error"]
    assert error["why"] == POLICY_WHY and "each call" not in error["why"]
    assert pending["Retry-After"] == "30"
    # Two faults: authorizationId missing, an amount written with a comma.
    wrong = {k: v for k, v in payment(client, "12.50").items() if k != "authorizationId"}
    refused = client.post("/agent/tools/send_payment/", {**wrong, "amount": "12,50"},
                          format="json")
    assert refused.status_code == 422
    error = refused.json()["error"]
    assert error["repair"]["fields"] == ["authorizationId", "amount"]
    assert '"authorizationId"' in error["message"] and "/amount" in error["message"]
    assert "(fields: authorizationId, amount)" in error["message"]


# -- over MCP, with the official client -------------------------------------------------------
def _run_mcp(url: str, token: str, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    seen: list[Any] = []

    async def main() -> None:
        http = httpx2.AsyncClient(headers={"Authorization": f"Token {token}"}, timeout=30)
        async with Client(streamable_http_client(url, http_client=http)) as client:
            for name, arguments in calls:
                seen.append(await client.call_tool(name, arguments))

    anyio.run(main)
    return seen


def _request_text(summary: dict[str, Any], given: int, required: int) -> str:
    return (f"Request {summary['id']} waits until {summary['expires_at']} for approval:"
            f" {given} of {required} approvals given. Ask again in 30 seconds at the earliest.")


@needs_mcp_2
@pytest.mark.django_db(transaction=True)
def test_over_mcp_the_text_says_which_request_waits_until_when_and_its_approvals(
        live_server: Any, user_factory: Any, make_tool: Any) -> None:
    """Tools with an output schema: the structured error is only in ``_meta`` (no
    ``structuredContent``), so the text an agent reads carries what it follows up."""
    user = user_factory("mcp-asker")
    token = Token.objects.create(user=user).key
    plain = make_tool(lambda input, ctx: {"ok": True}, confirm="always", output_schema=OUTPUT)
    two = make_tool(lambda input, ctx: {"ok": True}, output_schema=OUTPUT, confirm=Policy(
        version="1", rules=[Rule(name="all", outcome=Approvers(2), description="two approvers")]))
    first, second = _run_mcp(f"{live_server.url}/agent/mcp/", token, [
        (plain.name, {"operationId": key()}), (two.name, {"operationId": key()})])
    for result, required in ((first, 1), (second, 2)):
        assert result.is_error is True and result.structured_content is None
        error = result.meta[ERROR_META]
        assert error["code"] == "confirmation_required" and error["retry_after"] == 30
        summary = error["confirmation"]
        assert Confirmation.objects.filter(pk=summary["id"], status="pending").exists()
        text = result.content[0].text
        assert text.startswith(error["message"])
        assert text.endswith(_request_text(summary, 0, required)), text
    assert second.meta[ERROR_META]["why"] == (
        "This tool's approval policy decides call by call whether a call runs at once or waits"
        " for approval; its rule \"all\" makes this call wait for the approvals of 2 distinct"
        " staff members in the site's admin. Nothing has run yet.")


@needs_mcp_2
@pytest.mark.django_db(transaction=True)
def test_over_mcp_the_demo_payment_reads_right_and_lists_every_bad_field(
        live_server: Any, demo: dict[str, Any]) -> None:
    rest = APIClient()
    rest.credentials(HTTP_AUTHORIZATION=f"Token {AGENT_TOKEN}")
    body = payment(rest, "500.00")
    wrong = {k: v for k, v in payment(rest, "12.50").items() if k != "authorizationId"}
    pending, refused = _run_mcp(f"{live_server.url}/agent/mcp/", AGENT_TOKEN, [
        ("send_payment", body), ("send_payment", {**wrong, "amount": "12,50"})])
    error = pending.meta[ERROR_META]
    assert pending.structured_content is None  # send_payment has an output schema
    assert error["why"] == POLICY_WHY
    text = pending.content[0].text
    assert "\"up to 1,000.00\" applies: 0 of 1 approvals given" in text
    assert text.endswith(_request_text(error["confirmation"], 0, 1)), text
    invalid = refused.meta[ERROR_META]
    assert invalid["code"] == "invalid_input"
    assert invalid["repair"]["fields"] == ["authorizationId", "amount"]
    assert "(fields: authorizationId, amount)" in refused.content[0].text
