"""The demo's allowance (``demo_allowance``, after ``demo_seed``): small repeated payments
from Checking to Savings run without asking, up to 5 a day of at most 200.00; anything
else, and anything after ``--revoke``, waits for a person as before."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from guarded_tools.models import OperationEvent
from tests.integration.demo import Payer, call

pytestmark = pytest.mark.django_db


def test_small_payments_to_savings_run_under_the_demo_allowance(agent: APIClient) -> None:
    out = StringIO()
    call_command("demo_allowance", stdout=out)
    said = out.getvalue()
    assert "granted by approver" in said and "up to 5 calls per day, at most 200.00 a call" \
        in said, said
    listed = agent.get("/agent/tools/").json()["tools"]
    payment = next(t for t in listed if t["name"] == "send_payment")
    assert "5 calls left today" in payment["allowances"][0]
    payer = Payer(agent)
    answers = [payer.send(payer.body("150.00")) for _ in range(5)]
    assert [a.status_code for a in answers] == [200] * 5, answers[0].content
    assert OperationEvent.objects.filter(kind="allowance_used").count() == 5
    sixth = payer.send(payer.body("150.00"))
    assert sixth.status_code == 202
    assert "the 5 calls it allows per day are used" in sixth.json()["error"]["message"]
    # A bigger payment is asked of a person as ever.
    assert payer.send(payer.body("250.00")).status_code == 202
    accounts = call(agent, "list_payment_accounts", {}).json()["output"]["accounts"]
    assert accounts[0]["balance"] == "4250.00"


def test_a_revoked_demo_allowance_sends_the_next_payment_to_a_person(agent: Any) -> None:
    call_command("demo_allowance", stdout=StringIO())
    payer = Payer(agent)
    assert payer.send(payer.body("100.00")).status_code == 200
    call_command("demo_allowance", "--revoke", stdout=StringIO())
    assert payer.send(payer.body("100.00")).status_code == 202
