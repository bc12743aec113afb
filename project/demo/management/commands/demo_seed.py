"""Creates the demo's users, token, orders, slots and accounts (idempotent).

``staff`` is a superuser (the operator); ``approver`` is staff with only what an approver
needs (docs: approvers), so the demo shows the pages as such a person sees them.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management.base import BaseCommand
from django.db.models import Q
from django.utils import timezone
from rest_framework.authtoken.models import Token

from project.demo.models import Account, Order, Slot

AGENT_TOKEN = "demo-agent-token-0000000000000000000000"
#: What an approver needs (docs: approvers): the queue and request pages, deciding,
#: the audit trail, and what the request page links to (the calls, the accounts it names).
APPROVER_PERMISSIONS = ("guarded_tools.view_confirmation", "guarded_tools.approve_confirmation",
                        "guarded_tools.view_auditentry", "guarded_tools.view_operation",
                        "demo.view_account")


class Command(BaseCommand):
    help = "Create the demo users (agent, staff, approver), a token, and seed data."

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        agent, _ = User.objects.get_or_create(
            username="agent", defaults={"email": "agent@example.com"}
        )
        agent.set_password("agent")
        agent.save()
        agent.user_permissions.add(
            *Permission.objects.filter(
                # add/delete_order: the order API's model permissions (order_create, _destroy)
                codename__in=["change_order", "add_ledgerentry", "add_order", "delete_order"],
                content_type__app_label="demo",
            )
        )
        Token.objects.filter(user=agent).exclude(key=AGENT_TOKEN).delete()
        Token.objects.get_or_create(user=agent, key=AGENT_TOKEN)
        self._person("staff", superuser=True)  # the operator: everything, reconciling too
        # A person who only decides requests: the permissions the docs recommend.
        wanted = Q()
        for permission in APPROVER_PERMISSIONS:
            app_label, codename = permission.split(".")
            wanted |= Q(content_type__app_label=app_label, codename=codename)
        # Two of them: a payment above 1,000.00 needs two distinct approvers.
        for name in ("approver", "approver2"):
            self._person(name, superuser=False).user_permissions.set(
                Permission.objects.filter(wanted))
        for number, status in (("A-1001", "open"), ("A-1002", "shipped"), ("A-1003", "open")):
            Order.objects.get_or_create(
                number=number,
                defaults={"customer": agent, "status": status, "total": Decimal("49.90")},
            )
        if not Slot.objects.exists():
            start = timezone.now().replace(minute=0, second=0, microsecond=0) + timedelta(days=1)
            for i in range(4):
                Slot.objects.create(starts_at=start + timedelta(hours=i), resource="Room A")
        if not Account.objects.filter(owner=agent).exists():
            Account.objects.create(owner=agent, name="Checking", balance=Decimal("5000.00"))
            Account.objects.create(owner=agent, name="Savings", balance=Decimal("250.00"))
        self.stdout.write(self.style.SUCCESS(
            f"Demo data ready. Agent token: {AGENT_TOKEN}  Admin: staff/staff, approver/approver,"
            " approver2/approver2"
        ))

    def _person(self, name: str, *, superuser: bool) -> Any:
        """A staff user ``name``/``name`` with an address (emailed new requests)."""
        person, _ = get_user_model().objects.get_or_create(username=name)
        person.is_staff, person.is_superuser = True, superuser
        person.email = person.email or f"{name}@example.com"
        person.set_password(name)
        person.save()
        return person
