"""Grants the demo's allowance: small repeated payments to one receiver run without asking.

Run after ``demo_seed``: ``approver`` allows the agent up to 5 payments a day of at most
200.00 each, from its Checking account to its Savings, until the end of the year (at
least 30 days). Payments up to 1,000.00 need one approver, so one grant is enough. Run it
again to see the allowance as it stands; ``--revoke`` revokes it (the next such payment
waits for a person again).
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from guarded_tools.confirmations import allowances
from guarded_tools.models import Allowance, AllowanceStatus
from project.demo.models import Account


class Command(BaseCommand):
    help = "Grant (or --revoke) the demo agent's allowance for small payments to Savings."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--revoke", action="store_true",
                            help="Revoke the allowance, as approver.")

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        try:
            agent = User.objects.get(username="agent")
            approver = User.objects.get(username="approver")
            checking = Account.objects.get(owner=agent, name="Checking")
            savings = Account.objects.get(owner=agent, name="Savings")
        except (User.DoesNotExist, Account.DoesNotExist) as exc:
            raise CommandError("Run demo_seed first.") from exc
        current = Allowance.objects.filter(tool="send_payment", user=agent).exclude(
            status=AllowanceStatus.REVOKED).first()
        if options["revoke"]:
            if current is None:
                raise CommandError("The agent has no allowance to revoke.")
            allowances.revoke(current, approver, "revoked by demo_allowance --revoke")
            self.stdout.write(self.style.SUCCESS(f"Revoked allowance #{current.pk}."))
            return
        if current is None:
            now = timezone.localtime()
            until = now.replace(month=12, day=31, hour=23, minute=59, second=0,
                                microsecond=0)
            if until - now < timedelta(days=30):
                until = now + timedelta(days=30)
            current = allowances.propose(Allowance(
                tool="send_payment", user=agent, count=5, per_call=Decimal("200"),
                sum_field="amount", window="day", expires_at=until,
                constraints={"sourceId": [checking.pk], "receiverId": [savings.pk]},
            ), approver, note="Savings top-ups: small transfers to Savings run without asking.")
        self.stdout.write(self.style.SUCCESS(
            f"Allowance #{current.pk} ({current.get_status_display()}), granted by"
            f" {current.granters}: {allowances.bounds_text(current)};"
            f" {allowances.left_text(current)}."))
