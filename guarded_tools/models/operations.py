"""Provides the operation journal: operations, their states and the journal entries
a handler writes."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import Case, F, Q, Value, When
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from guarded_tools.core.jsonvalues import StoredJSONEncoder


class OperationState(models.TextChoices):
    """Where an operation stands, from its claim to its end."""

    IN_FLIGHT = "in_flight", _("in flight")
    """A live owner holds the claim and its lease; the handler may be running."""
    ABANDONED = "abandoned", _("abandoned")
    """The handler failed after its effect boundary; recovery decides what happened."""
    SUCCEEDED = "succeeded", _("succeeded")
    """Completed; replays return the stored output."""
    FAILED = "failed", _("failed")
    """Terminal failure (set by a person); replays return the stored error."""
    OUTCOME_UNKNOWN = "outcome_unknown", _("outcome unknown")
    """Recovery could not prove success or non-execution; a person must reconcile."""
    RELEASED = "released", _("released")
    """Not run, or proven not executed; the key is fresh again and the next call claims
    it. ``Operation.release_reason`` says why."""


class ReleaseReason(models.TextChoices):
    """Why a claim was released: its key is fresh again and nothing of its effect happened."""

    WAITING_FOR_APPROVAL = "waiting_for_approval", _("waiting for approval")
    """The call asks a person to approve it; the agent's retry runs it once approved."""
    DECLINED = "declined", _("declined")
    """A person (or the tool's confirm hook) declined the call."""
    EXPIRED = "expired", _("approval expired")
    """Nobody approved the call in time, or its approval ran out before a retry used it."""
    WITHDRAWN = "withdrawn", _("withdrawn")
    """The agent withdrew its request before the call ran."""
    RATE_LIMITED = "rate_limited", _("rate limited")
    """A budget's count of calls per window was reached."""
    OVER_BUDGET = "over_budget", _("over budget")
    """The call would have taken a budget's sum past its limit."""
    REFUSED = "refused", _("refused before it ran")
    """A check after the claim refused the call: the tool's precheck, its input's own
    validation, or a stage of the site's."""
    FAILED_BEFORE_EFFECT = "failed_before_effect", _("failed before its effect")
    """The handler failed and nothing of its effect happened: it raised ``ToolError``
    with an empty journal, its journal was empty (recovery's proof included), or its
    transaction rolled back."""
    NOT_EXECUTED = "not_executed", _("proved not run (marked not executed by a person)")
    """A person reconciled an unknown outcome as not executed."""


def unknown_first() -> Case:
    """0 for an operation whose outcome is unknown, 1 for any other: the admin's order."""
    return Case(When(state=OperationState.OUTCOME_UNKNOWN, then=Value(0)), default=Value(1),
                output_field=models.IntegerField())


class CoveringIndex(models.Index):
    """An index that carries ``covering`` columns (``INCLUDE``) where the database has
    covering indexes (PostgreSQL), and is the same index without them elsewhere.

    Django's ``Index(include=...)`` does the same on SQLite but warns (``models.W040``)
    at every ``check --database`` and ``migrate`` of every SQLite site: a reusable app's
    index must not. The model state keeps ``covering``, so ``makemigrations`` sees the
    one index on every database; only the SQL that creates it differs.
    """

    def __init__(self, *expressions: Any, covering: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(*expressions, **kwargs)
        self.covering = tuple(covering)

    def deconstruct(self) -> Any:
        path, args, kwargs = super().deconstruct()
        kwargs["covering"] = self.covering
        return path, args, kwargs

    def create_sql(self, model: Any, schema_editor: Any, using: str = "", **kwargs: Any) -> Any:
        if not self.covering or not schema_editor.connection.features.supports_covering_indexes:
            return super().create_sql(model, schema_editor, using=using, **kwargs)
        _, args, options = self.deconstruct()
        options["include"] = options.pop("covering")
        return models.Index(*args, **options).create_sql(model, schema_editor, using=using,
                                                         **kwargs)


class OperationQuerySet(models.QuerySet["Operation"]):
    """Queries over operations (``Operation.objects``)."""

    def abandoned(self) -> OperationQuerySet:
        """Claims with no live owner: abandoned, or in flight past their lease (DB clock)."""
        return self.filter(
            Q(state=OperationState.ABANDONED)
            | Q(state=OperationState.IN_FLIGHT, lease_expires_at__lt=Now())
        )

    def unknown(self) -> OperationQuerySet:
        return self.filter(state=OperationState.OUTCOME_UNKNOWN)

    def waiting_for_approval(self) -> OperationQuerySet:
        """Released claims whose call waits for a person's approval."""
        return self.filter(state=OperationState.RELEASED,
                           release_reason=ReleaseReason.WAITING_FOR_APPROVAL)

    def in_flight(self) -> OperationQuerySet:
        return self.filter(state=OperationState.IN_FLIGHT)

    def running(self) -> OperationQuerySet:
        """In flight with a live lease (DB clock): an owner may still be running it."""
        return self.filter(state=OperationState.IN_FLIGHT, lease_expires_at__gte=Now())

    def completed_before(self, cutoff: Any) -> OperationQuerySet:
        return self.filter(
            state__in=[OperationState.SUCCEEDED, OperationState.RELEASED, OperationState.FAILED],
            updated_at__lt=cutoff,
        )


class Operation(models.Model):
    """One intended operation: a (tool, principal scope, idempotency key) claim."""

    id = models.UUIDField(_("id"), primary_key=True, default=uuid.uuid4, editable=False)
    tool = models.CharField(_("tool"), max_length=200, help_text=_("Registered tool name."))
    scope = models.CharField(
        _("principal scope"),
        max_length=200,
        help_text=_("Whose key this is: keys never cross principals."),
    )
    key = models.CharField(_("idempotency key"), max_length=255)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("principal"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        # Every call inserts an operation. A database constraint would make each commit
        # lock the caller's user row (FOR KEY SHARE): concurrent calls of one principal
        # would contend on it, and a transaction holding that row would stall them.
        # Django still sets this to NULL when the user is deleted (on_delete).
        db_constraint=False,
        help_text=_("The user who called the tool, when there was one."),
    )
    fingerprint = models.CharField(
        _("request fingerprint"),
        max_length=64,
        help_text=_("SHA-256 of the canonical JSON input."),
    )
    input = models.JSONField(_("input"), encoder=DjangoJSONEncoder, default=dict)
    state = models.CharField(
        _("state"), max_length=20, choices=OperationState.choices, default=OperationState.IN_FLIGHT
    )
    owner = models.CharField(
        _("owner token"),
        max_length=64,
        blank=True,
        help_text=_("Token of the process holding the claim; empty when nobody does."),
    )
    fence = models.PositiveIntegerField(
        _("fence"), default=1, help_text=_("Raised on every takeover; stale owners update 0 rows.")
    )
    lease_expires_at = models.DateTimeField(
        _("lease expires at"), null=True, blank=True, help_text=_("Database clock.")
    )
    output = models.JSONField(_("output"), encoder=StoredJSONEncoder, null=True, blank=True)
    error = models.JSONField(
        _("error"),
        encoder=DjangoJSONEncoder,
        null=True,
        blank=True,
        help_text=_("The structured error replays return (failed or unknown outcome)."),
    )
    recovered = models.BooleanField(
        _("recovered"), default=False, help_text=_("Completed by recovery, not by its handler.")
    )
    # A database default too: a process still running the previous release names every
    # column it inserts, so during a rolling deploy its claims would otherwise fail.
    reconciled = models.BooleanField(
        _("reconciled"), default=False, db_default=False,
        help_text=_("A person marked it succeeded: final, its replays are never re-judged."),
    )
    attempts = models.PositiveIntegerField(
        _("attempts"), default=1, help_text=_("Fresh claims of this key (after releases).")
    )
    # A database default too, as ``reconciled``: claims inserted by a process still
    # running the previous release name no such column.
    release_reason = models.CharField(
        _("release reason"), max_length=32, blank=True, default="", db_default="",
        choices=ReleaseReason.choices,
        help_text=_("Why the claim was released (the key fresh again); blank otherwise."),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    completed_at = models.DateTimeField(_("completed at"), null=True, blank=True)

    objects = OperationQuerySet.as_manager()

    class Meta:
        verbose_name = _("operation")
        verbose_name_plural = _("operations")
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tool", "scope", "key"], name="guarded_tools_operation_claim"
            )
        ]
        indexes = [
            # Only claims that can be abandoned: the sweep's index stays as small as the
            # work it finds, and a call that completes never writes to it.
            models.Index(
                fields=["lease_expires_at"],
                name="gt_operation_open_lease",
                condition=Q(state__in=[OperationState.IN_FLIGHT, OperationState.ABANDONED]),
            ),
            # By state: the purge's old completed rows, the dashboard's exact counts of
            # the states a person acts on and its oldest in-flight claim (created_at is
            # carried along on PostgreSQL, so neither reads the table there).
            CoveringIndex(fields=["state", "updated_at"], covering=["created_at"],
                          name="gt_operation_state_updated"),
            # The admin dashboard's "recovered in the last day": only recovered rows, so
            # the calls that complete by themselves never write to it.
            models.Index(fields=["completed_at"], name="gt_operation_recovered",
                         condition=Q(recovered=True)),
            # The admin's list: unknown outcomes first, then the newest (and the primary
            # key the changelist adds to make its order total). The expression is the
            # one ``unknown_first()`` orders by, so a page reads 100 index entries
            # instead of sorting the table.
            models.Index(unknown_first(), F("created_at").desc(), F("id").desc(),
                         name="gt_operation_unknown_first"),
        ]
        permissions = [("reconcile_operation", _("Can reconcile operations"))]

    def __str__(self) -> str:
        return f"{self.tool} [{self.key[:40]}]"

    def summary(self, *, replayed: bool = False) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "key": self.key,
            "status": self.state,
            "replayed": replayed,
            "recovered": self.recovered,
        }


class JournalEntryQuerySet(models.QuerySet["JournalEntry"]):
    """Queries over journal entries (``JournalEntry.objects``)."""

    def live(self, operation_id: Any) -> JournalEntryQuerySet:
        """The operation's entries that count: the handler's own, not removed.

        An empty result is what proves the handler stopped before its effect.
        """
        return self.filter(
            operation_id=operation_id, kind=JournalEntry.Kind.ENTRY, removed=False
        )


class JournalEntry(models.Model):
    """What a handler wrote through its operation handle around its effect."""

    class Kind(models.TextChoices):
        ENTRY = "entry", _("entry")
        """Written by the handler through ``ctx.operation.write``."""
        LATE_RESULT = "late_result", _("late result")
        """Result of an owner that lost its lease: evidence for reconciliation."""

    operation = models.ForeignKey(
        Operation,
        verbose_name=_("operation"),
        on_delete=models.CASCADE,
        related_name="journal",
        db_index=False,  # gt_journal_live starts with it
    )
    kind = models.CharField(_("kind"), max_length=20, choices=Kind.choices, default=Kind.ENTRY)
    data = models.JSONField(_("data"), encoder=DjangoJSONEncoder, null=True)
    fence = models.PositiveIntegerField(_("fence"), help_text=_("Fence of the writer."))
    removed = models.BooleanField(
        _("removed"),
        default=False,
        help_text=_(
            "Removed by the handler, or by a person who marked the operation not executed;"
            " kept for history."
        ),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    objects = JournalEntryQuerySet.as_manager()

    class Meta:
        verbose_name = _("journal entry")
        verbose_name_plural = _("journal entries")
        ordering = ["operation", "id"]
        indexes = [models.Index(fields=["operation", "kind", "removed"], name="gt_journal_live")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} #{self.pk}"
