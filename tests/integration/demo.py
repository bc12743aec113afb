"""The demo as its users reach it: the seeded agent's token over REST, people in the admin."""

from __future__ import annotations

import re
import uuid
from typing import Any

from django.test import Client
from rest_framework.test import APIClient

from guarded_tools.models import Confirmation

CONF = "/admin/guarded_tools/confirmation/"


def call(agent: APIClient, tool: str, body: dict[str, Any]) -> Any:
    return agent.post(f"/agent/tools/{tool}/", body, format="json")


def csrf(client: Client, url: str) -> str:
    page = client.get(url)
    assert page.status_code == 200, url
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode())
    assert found, url
    return found.group(1)


def log_in(name: str) -> Client:
    """A person of the demo logged in through the admin's form (password = name), with CSRF."""
    client = Client(enforce_csrf_checks=True)
    login = client.post("/admin/login/?next=/admin/", {
        "username": name, "password": name, "csrfmiddlewaretoken": csrf(client, "/admin/login/")})
    assert login.status_code == 302, name
    return client


def decide(person: Client, confirmation: Confirmation) -> None:
    page = f"{CONF}{confirmation.pk}/change/"
    answer = person.post(f"{CONF}{confirmation.pk}/decide/", {
        "decision": "approve", "csrfmiddlewaretoken": csrf(person, page)})
    assert answer.status_code == 302


class Payer:
    """The agent paying from its Checking account to its Savings, as the docs' demo tour does."""

    def __init__(self, agent: APIClient) -> None:
        self.agent = agent
        accounts = call(agent, "list_payment_accounts", {}).json()["output"]["accounts"]
        self.source, self.receiver = accounts
        assert (self.source["name"], self.source["balance"]) == ("Checking", "5000.00")

    def body(self, amount: str) -> dict[str, Any]:
        authorization = call(self.agent, "prepare_payment_authorization", {
            "requestId": str(uuid.uuid4()), "sourceId": self.source["id"]}).json()["output"]
        return {"operationId": str(uuid.uuid4()), "sourceId": self.source["id"],
                "receiverId": self.receiver["id"], "amount": amount, **authorization}

    def send(self, body: dict[str, Any]) -> Any:
        return call(self.agent, "send_payment", body)


def matches(shown: str, body: str) -> bool:
    """``body`` is the page's ``shown`` text, "…" standing for any text."""
    pattern = ".*?".join(re.escape(part) for part in shown.split("…"))
    return re.fullmatch(pattern, body, flags=re.S) is not None
