"""The demo's payment policy, exactly as issue 27 states it and the docs' demo tour walks it, on the
seeded data (``demo_seed``): the agent's token over REST, approver and approver2 deciding
in the admin with their own logins and CSRF tokens.

- up to 50.00 runs without a person; above 50.00 up to 1,000.00 one approval; above
  1,000.00 two, from distinct approvers;
- each user at most 2,000.00 a day (above it, two approvals instead of a refusal) and at
  most 10 payments a minute (the eleventh: ``429 rate_limited`` with ``Retry-After``).
"""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from guarded_tools.models import BudgetCounter, Confirmation, ConfirmationStatus
from tests.integration.demo import Payer, call, decide, log_in

pytestmark = pytest.mark.django_db


def test_the_demo_policy_asks_as_the_issue_says(agent: APIClient) -> None:
    payer = Payer(agent)
    approver, approver2 = log_in("approver"), log_in("approver2")

    def asked(amount: str) -> tuple[dict[str, Any], dict[str, Any]]:
        body = payer.body(amount)
        answer = payer.send(body)
        assert answer.status_code == 202, answer.content
        return body, answer.json()["error"]["confirmation"]

    assert payer.send(payer.body("50.00")).status_code == 200  # at once (50.00 today)
    body, one = asked("50.01")
    assert (one["rule"], one["approvals"]) == ("up to 1,000.00", {"given": 0, "required": 1})
    decide(approver, Confirmation.objects.get(pk=one["id"]))
    assert payer.send(body).status_code == 200  # 100.01 today
    body, two = asked("1000.01")
    assert (two["rule"], two["approvals"]) == ("above 1,000.00", {"given": 0, "required": 2})
    pending = Confirmation.objects.get(pk=two["id"])
    decide(approver, pending)
    decide(approver, pending)  # the same person twice is one approval
    again = payer.send(body)
    assert again.status_code == 202 and "1 of 2 approvals given" in again.json()["error"]["message"]
    decide(approver2, pending)
    paid = payer.send(body)
    assert paid.status_code == 200, paid.content  # 1,100.02 today
    assert paid.json()["output"]["amount"] == "1000.01"
    # 1,000.00 more would pass 2,000.00 today: two approvals instead of one, not a refusal.
    body, over = asked("1000.00")
    assert over["rule"] == "over budget send_payment per day"
    assert over["approvals"] == {"given": 0, "required": 2}
    pending = Confirmation.objects.get(pk=over["id"])
    decide(approver, pending)
    decide(approver2, pending)
    assert payer.send(body).status_code == 200  # 2,100.02 today
    # Over the day's budget, even a small payment waits for two people.
    _, small = asked("10.00")
    assert small["rule"] == "over budget send_payment per day"
    assert small["approvals"]["required"] == 2
    assert Confirmation.objects.get(pk=small["id"]).status == ConfirmationStatus.PENDING
    accounts = call(agent, "list_payment_accounts", {}).json()["output"]["accounts"]
    assert accounts[0]["balance"] == "2899.98"


def test_the_demo_rate_limits_the_eleventh_payment_in_a_minute(agent: APIClient) -> None:
    payer = Payer(agent)
    for _window in range(2):  # a burst that straddles a minute boundary is tried again
        answers = [payer.send(payer.body("1.00")) for _ in range(11)]
        windows = BudgetCounter.objects.filter(budget="send_payment per minute")
        if windows.count() == 1 or _window == 1:
            break
        windows.delete()
    assert [a.status_code for a in answers[:10]] == [200] * 10
    limited = answers[10]
    assert limited.status_code == 429, limited.content
    error = limited.json()["error"]
    assert error["code"] == "rate_limited" and error["retry"] == "as_is"
    assert 1 <= int(limited.headers["Retry-After"]) <= 60
    assert error["link"].endswith("/agent/errors/#rate_limited")
