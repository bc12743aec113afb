"""Every answer of a budgeted tool says what is left and when it frees, and says what the
budget use page of the admin says: REST's ``RateLimit-Policy``/``RateLimit`` fields and
``meta.budgets`` (token and session), MCP's ``_meta`` through the official client."""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal
from html.parser import HTMLParser
from typing import Any

import pytest

from guarded_tools import Budget, Policy, Rule, Run
from guarded_tools.console.formatting import when
from guarded_tools.models import BudgetOverride
from guarded_tools.pipeline.budget_status import sf_string
from tests.pipeline.policy_support import SCHEMA, pay

USE = "/admin/guarded_tools/budgetcounter/"
BUDGETS_META = "io.github.guarded-tools/budgets"


def policy() -> Policy:
    return Policy(rules=[Rule(outcome=Run(), description="Everything runs at once")],
                  budgets=[Budget(name="spend", count=5, sum_field="amount", limit=1000)])


class Cells(HTMLParser):
    """The changelist's rows: each a dict of its cells' text by column (field-… class)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, str]] = []
        self.column: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = dict(attrs).get("class") or ""
        if tag == "tr":
            self.rows.append({})
        elif tag in ("td", "th") and classes.startswith("field-") and self.rows:
            self.column = classes.split()[0].removeprefix("field-")
            self.rows[-1][self.column] = ""
        elif tag == "br" and self.column:
            self.rows[-1][self.column] += " "

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th"):
            self.column = None

    def handle_data(self, data: str) -> None:
        if self.column and self.rows:
            self.rows[-1][self.column] += data


def page_row(staff_client: Any, scope: str) -> dict[str, str]:
    page = staff_client.get(USE)
    assert page.status_code == 200
    parser = Cells()
    parser.feed(page.content.decode())
    found = [row for row in parser.rows if scope in row.get("principal", "")]
    assert len(found) == 1, parser.rows
    return {k: " ".join(v.split()) for k, v in found[0].items()}


def fields(response: Any) -> tuple[dict[str, str], dict[str, str]]:
    """The ``RateLimit-Policy`` and ``RateLimit`` fields, parsed: parameters by name."""
    def one(value: str) -> dict[str, str]:
        name, *params = value.split(";")
        return {"name": name, **dict(p.split("=", 1) for p in params)}
    return one(response["RateLimit-Policy"]), one(response["RateLimit"])


def agrees(staff_client: Any, scope: str, budgets: list[dict[str, Any]]) -> None:
    """The answer's budget is the page's row: calls and sum used of their limits, frees at."""
    row = page_row(staff_client, scope)
    (budget,) = budgets
    calls, total = budget["calls"], budget["sum"]
    assert row["calls"] == f"{calls['used']} of {calls['limit']}"
    assert row["amount"] == (f"{Decimal(total['used']):,.2f} of"
                             f" {Decimal(total['limit']):,.2f}")
    assert row["frees_at"] == when(datetime.fromisoformat(budget["frees_at"]))


@pytest.fixture
def staff_client(user_factory: Any, session_client_for: Any) -> Any:
    return session_client_for(user_factory("auditor", is_staff=True,
                                           perms=("guarded_tools.view_budgetcounter",)))


@pytest.mark.django_db
@pytest.mark.parametrize("auth", ["token", "session"])
def test_rest_answers_carry_the_limits_the_budget_page_shows(
        auth: str, make_tool: Any, alice: Any, client_for: Any, session_client_for: Any,
        staff_client: Any) -> None:
    definition = make_tool(confirm=policy(), input_schema=SCHEMA)
    BudgetOverride.objects.create(budget="spend", user=alice, count=4, note="a smaller day")
    agent = client_for(alice) if auth == "token" else session_client_for(alice)
    scope = f"auth.user:{alice.pk}"

    for _ in range(2):
        done = pay(agent, definition.name, 300)
        assert done.status_code == 200, done.json()
    quota, left = fields(done)
    assert quota["name"] == '"spend"' and quota["q"] == "4"
    budget = done.json()["meta"]["budgets"][0]
    window = (datetime.fromisoformat(budget["frees_at"])
              - datetime.fromisoformat(budget["window_start"])).total_seconds()
    assert quota["w"] == str(int(window))
    assert left["r"] == "2" and 0 < int(left["t"]) <= window
    assert int(left["t"]) == budget["resets_in"]
    assert budget["calls"] == {"limit": 4, "used": 2, "remaining": 2}
    assert budget["sum"] == {"field": "amount", "limit": "1000.00", "used": "600.00",
                             "remaining": "400.00"}
    agrees(staff_client, scope, done.json()["meta"]["budgets"])

    refused = pay(agent, definition.name, 500)  # over the sum: refused, nothing reserved
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "budget_exceeded"
    assert fields(refused)[1]["r"] == "2"
    assert refused.json()["meta"]["budgets"][0]["sum"]["remaining"] == "400.00"
    agrees(staff_client, scope, refused.json()["meta"]["budgets"])

    for _ in range(2):
        pay(agent, definition.name, 10)
    limited = pay(agent, definition.name, 10)  # the fifth call of a day of four
    assert limited.status_code == 429 and limited.json()["error"]["code"] == "rate_limited"
    assert fields(limited)[1]["r"] == "0"
    assert abs(int(limited["Retry-After"]) - int(fields(limited)[1]["t"])) <= 1
    agrees(staff_client, scope, limited.json()["meta"]["budgets"])


@pytest.mark.django_db
def test_a_tool_without_budgets_carries_no_fields(make_tool: Any, alice: Any,
                                                   client_for: Any) -> None:
    definition = make_tool(input_schema=SCHEMA)
    done = pay(client_for(alice), definition.name)
    assert done.status_code == 200
    assert "RateLimit" not in done and "meta" not in done.json()


@pytest.mark.django_db
def test_a_sum_alone_goes_in_the_body_not_in_the_fields(make_tool: Any, alice: Any,
                                                        client_for: Any) -> None:
    definition = make_tool(input_schema=SCHEMA, confirm=Policy(
        rules=[Rule(outcome=Run(), description="runs")],
        budgets=[Budget(name="money", sum_field="amount", limit=50, window="week")]))
    done = pay(client_for(alice), definition.name, 20)
    assert "RateLimit" not in done and "RateLimit-Policy" not in done
    (budget,) = done.json()["meta"]["budgets"]
    assert budget["window"] == "week" and "calls" not in budget
    assert budget["sum"]["remaining"] == "30.00"


def test_budget_names_are_structured_field_strings() -> None:
    assert sf_string('a "b"\\c\u00e9') == '"a \\"b\\"\\\\c?"'
    assert re.fullmatch(r'"[ -~]*"', sf_string("spend"))


@pytest.mark.skipif(
    not __import__("importlib.metadata").metadata.version("mcp").startswith("2"),
    reason="the official client's 2.x API")
@pytest.mark.django_db(transaction=True)
def test_mcp_answers_carry_the_limits_in_meta(live_server: Any, user_factory: Any,
                                              make_tool: Any, client_for: Any,
                                              staff_client: Any) -> None:
    import anyio
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from rest_framework.authtoken.models import Token

    agent = user_factory("mcp-agent")
    token = Token.objects.create(user=agent)
    definition = make_tool(confirm=policy(), input_schema=SCHEMA)
    answers: list[Any] = []

    async def main() -> None:
        http = httpx2.AsyncClient(headers={"Authorization": f"Token {token.key}"}, timeout=30)
        transport = streamable_http_client(f"{live_server.url}/agent/mcp/", http_client=http)
        async with transport as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for amount in (700, 200, 500):  # the third is over the sum
                answers.append(await session.call_tool(
                    definition.name, {"operationId": f"op-{amount}", "amount": amount}))

    anyio.run(main)
    assert [a.is_error for a in answers] == [False, False, True]
    budgets = answers[-1].meta[BUDGETS_META]
    assert budgets[0]["calls"] == {"limit": 5, "used": 2, "remaining": 3}
    assert budgets[0]["sum"]["used"] == "900.00" and budgets[0]["sum"]["remaining"] == "100.00"
    assert answers[-1].meta["io.github.guarded-tools/error"]["code"] == "budget_exceeded"
    assert answers[0].meta[BUDGETS_META][0]["sum"]["used"] == "700.00"
    agrees(staff_client, f"auth.user:{agent.pk}", budgets)
    # What REST answers the same caller now is what MCP answered.
    rest = client_for(agent).post(f"/agent/tools/{definition.name}/",
                                  {"operationId": "op-200", "amount": 200}, format="json")
    assert rest.json()["meta"]["budgets"][0]["sum"] == budgets[0]["sum"]
