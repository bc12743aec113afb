"""Leaves a demo payment in trouble, for an operator to try the console on."""

from __future__ import annotations

import uuid
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from guarded_tools.core import hosts
from guarded_tools.models import JournalEntry, Operation, OperationState
from guarded_tools.pipeline import principal_scope
from guarded_tools.store import fingerprint, history
from project.demo.models import Account, PaymentAuthorization

#: What the pipeline stores when the handler died and recover could not read the ledger.
INCIDENT_ERROR = {"code": "outcome_unknown", "failure": "ConnectionResetError",
                  "recover": "recover raised OperationalError (the ledger was unreachable)"}


class Command(BaseCommand):
    help = (
        "Leave a send_payment of the demo agent as a crash would: 'unknown' (the handler"
        " died after journaling the transfer and nobody could tell whether it happened:"
        " reconcile it in the admin) or 'abandoned' (its process died mid-call: the sweep,"
        " or the agent's retry, recovers it from the ledger). Run demo_seed first."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("kind", choices=["unknown", "abandoned"])
        parser.add_argument("--amount", default="500.00")

    def handle(self, *args: Any, **options: Any) -> None:
        agent = get_user_model()._default_manager.filter(username="agent").first()
        accounts = list(Account.objects.filter(owner=agent).order_by("pk")[:2]) if agent else []
        if len(accounts) < 2:
            raise CommandError("Run `manage.py demo_seed` first: the agent has no accounts.")
        source, receiver = accounts
        auth = PaymentAuthorization.objects.create(source=source, source_version=source.version)
        key = f"incident-{uuid.uuid4().hex[:8]}"
        body = {"operationId": key, "sourceId": source.pk,
                "receiverId": receiver.pk, "amount": str(Decimal(options["amount"])),
                "authorizationId": auth.pk}
        unknown = options["kind"] == "unknown"
        with transaction.atomic():
            operation = Operation.objects.create(
                tool="send_payment", scope=principal_scope(agent, None) or "", key=key,
                user=agent, fingerprint=fingerprint(body), input=body,
                state=OperationState.OUTCOME_UNKNOWN if unknown else OperationState.IN_FLIGHT,
                owner="" if unknown else uuid.uuid4().hex,
                lease_expires_at=None if unknown else timezone.now() - timedelta(seconds=1),
                error=INCIDENT_ERROR if unknown else None,
            )
            phases = ["transferring", "transferred"] if unknown else ["transferring"]
            agent_label = history.actor_label(agent, agent=True)
            events = [history.event(operation, history.Kind.CLAIMED, agent_label, fence=1)]
            for phase in phases:
                data = {"phase": phase, "reference": key}
                JournalEntry.objects.create(operation=operation, fence=1, data=data)
                events.append(history.event(operation, history.Kind.JOURNAL, agent_label,
                                            fence=1, data=data))
            if unknown:  # the history as the pipeline writes it (the timeline reads it)
                events.append(history.event(operation, history.Kind.OUTCOME_UNKNOWN, agent_label,
                                            fence=1, **INCIDENT_ERROR))
            history.record_all(events)
        path = reverse("admin:guarded_tools_operation_change", args=[operation.pk])
        # A link the terminal opens: on the address the site names (the demo's own).
        url = hosts.site_url(path) or path
        what = ("Outcome unknown: decide it at" if unknown
                else "Abandoned (lease expired): run `manage.py guarded_tools_sweep`, or look at")
        self.stdout.write(self.style.SUCCESS(f"{what} {url}"))
