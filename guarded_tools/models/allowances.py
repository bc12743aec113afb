"""Provides allowances (standing approvals): a principal may run a tool without asking,
within bounds people granted, and the counters their calls use."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Case, Count, OuterRef, Q, Subquery, Sum, Value, When
from django.db.models.functions import Coalesce, Now
from django.utils.translation import gettext_lazy as _

from guarded_tools.core.call import user_row
from guarded_tools.core.policy import Budget


class AllowanceStatus(models.TextChoices):
    """Where an allowance stands: waiting for granters, active, suspended or revoked."""

    PENDING = "pending", _("waiting for more granters")
    """Granted by fewer people than its bounds need: nothing runs under it yet."""
    ACTIVE = "active", _("active")
    """Calls within its bounds run without asking a person."""
    SUSPENDED = "suspended", _("suspended")
    """Stopped until people grant it again: a policy asking more, or a granter who lost
    the permission or was deactivated."""
    REVOKED = "revoked", _("revoked")
    """Revoked by a person: final."""


class AllowanceQuerySet(models.QuerySet["Allowance"]):
    """Allowances by what a call asks of them: the active ones, a principal's."""

    def active(self, now: datetime | None = None) -> AllowanceQuerySet:
        """Active and not expired at ``now`` (a call's clock), else on the database's."""
        return self.filter(status=AllowanceStatus.ACTIVE,
                           expires_at__gt=Now() if now is None else now)

    def for_principal(self, user: Any, application: str = "") -> AllowanceQuerySet:
        """Those granted to ``user``, to a group of theirs, or to the OAuth application
        the call came through. A user object that is no row of the user model (a
        stateless token's user) has no allowances of its own: its ``pk`` names no user
        here, as its calls are kept apart from that user's (``user_row``)."""
        who = Q(pk__in=[])
        row = user_row(user)
        if row is not None and getattr(row, "is_authenticated", False):
            who |= Q(user_id=row.pk) | Q(group__in=row.groups.all())
        if application:
            who |= Q(application=application)
        return self.filter(who)

    def with_use(self, now: datetime) -> AllowanceQuerySet:
        """Each with what its calls used in the window ``now`` falls in, read in the same
        query (``used_calls``, ``used_sum``, and ``use_window``, that window's start):
        ``guarded_tools.store.allowances.remaining`` reads them instead of counting."""
        starts = [(window, Budget(name=window, window=window).window_start(now))
                  for window, _label in WINDOWS]
        uses = AllowanceUse.objects.filter(
            counter__allowance=OuterRef("pk"), counter__window_start=OuterRef("use_window"),
        ).order_by().values("counter__allowance")
        amount = models.DecimalField(max_digits=30, decimal_places=4)
        return self.annotate(use_window=Case(
            *[When(window=window, then=Value(start)) for window, start in starts],
            output_field=models.DateTimeField())).annotate(
            used_calls=Coalesce(Subquery(uses.annotate(n=Count("pk")).values("n")), 0),
            used_sum=Coalesce(Subquery(uses.annotate(total=Sum("amount")).values("total"),
                                       output_field=amount),
                              Value(Decimal(0)), output_field=amount))


WINDOWS = [("day", _("day")), ("week", _("week")), ("month", _("month"))]


class Allowance(models.Model):
    """A standing approval: this principal may run this tool without asking a person, up
    to ``count`` calls and/or ``limit`` of ``sum_field`` per window, at most
    ``per_call`` a call, with inputs in ``constraints``, until ``expires_at``."""

    tool = models.CharField(_("tool"), max_length=200)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("user"), null=True, blank=True,
        on_delete=models.CASCADE, related_name="+",
        help_text=_("The user whose calls it allows. Give one principal: a user, a group or"
                    " an OAuth application."))
    group = models.ForeignKey(
        "auth.Group", verbose_name=_("group"), null=True, blank=True,
        on_delete=models.CASCADE, related_name="+",
        help_text=_("Every member's calls."))
    application = models.CharField(
        _("OAuth application"), max_length=200, blank=True, default="",
        help_text=_("The client id of an OAuth application: calls made with its tokens."))
    count = models.PositiveIntegerField(
        _("calls per window"), null=True, blank=True,
        help_text=_("At most this many calls run under it per window."))
    limit = models.DecimalField(
        _("sum per window"), max_digits=20, decimal_places=4, null=True, blank=True,
        help_text=_("At most this sum of the amount field per window."))
    sum_field = models.CharField(
        _("amount field"), max_length=100, blank=True, default="",
        help_text=_("The input field the sum and the per-call bound count (e.g. amount)."))
    per_call = models.DecimalField(
        _("at most per call"), max_digits=20, decimal_places=4, null=True, blank=True,
        help_text=_("A call asking more than this waits for a person."))
    window = models.CharField(_("window"), max_length=10, choices=WINDOWS, default="day")
    constraints = models.JSONField(
        _("input constraints"), default=dict, blank=True,
        help_text=_('Allowed values per input field, e.g. {"receiverId": ["r-17"]}.'))
    expires_at = models.DateTimeField(_("until"))
    status = models.CharField(_("status"), max_length=20, choices=AllowanceStatus.choices,
                              default=AllowanceStatus.PENDING)
    status_reason = models.TextField(_("why"), blank=True, default="")
    policy_version = models.CharField(_("policy version"), max_length=40, blank=True,
                                      default="")
    policy_rule = models.CharField(
        _("strictest rule"), max_length=300, blank=True, default="",
        help_text=_("The strictest rule a call within its bounds meets, when granted."))
    approvals_required = models.PositiveSmallIntegerField(
        _("granters required"), default=1,
        help_text=_("Distinct people who must grant it (0: the owner grants for their own"
                    " account)."))
    approvers_group = models.CharField(_("granters' group"), max_length=150, blank=True,
                                       default="")
    approvers_permission = models.CharField(_("granters' permission"), max_length=200,
                                            blank=True, default="")
    approvals = models.JSONField(_("granted by"), default=list, blank=True,
                                 help_text=_("Who granted it, and when."))
    confirmation = models.ForeignKey(
        "guarded_tools.Confirmation", verbose_name=_("granted from request"), null=True,
        blank=True, on_delete=models.SET_NULL, related_name="allowances")
    note = models.TextField(_("note"), blank=True, default="")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("proposed by"), null=True, blank=True,
        on_delete=models.SET_NULL, related_name="+", editable=False)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    granted_at = models.DateTimeField(_("granted at"), null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("revoked by"), null=True, blank=True,
        on_delete=models.SET_NULL, related_name="+", editable=False)
    revoked_at = models.DateTimeField(_("revoked at"), null=True, blank=True)

    objects = AllowanceQuerySet.as_manager()

    class Meta:
        verbose_name = _("allowance")
        verbose_name_plural = _("allowances")
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["tool", "status"], name="gt_allowance_tool")]
        constraints = [
            models.CheckConstraint(
                condition=(Q(user__isnull=False, group__isnull=True, application="")
                           | Q(user__isnull=True, group__isnull=False, application="")
                           | (Q(user__isnull=True, group__isnull=True)
                              & ~Q(application=""))),
                name="gt_allowance_one_principal",
                violation_error_message=_("Give one principal: a user, a group or an OAuth"
                                          " application."),
            ),
            models.CheckConstraint(
                condition=Q(count__isnull=False) | Q(limit__isnull=False),
                name="gt_allowance_bounded",
                violation_error_message=_("Give a number of calls or a sum per window."),
            ),
        ]

    def __str__(self) -> str:
        return f"allowance #{self.pk} · {self.tool} · {self.principal}"

    @property
    def principal(self) -> str:
        """Whom it allows, in words: "user alice", "group finance", "application abc"."""
        if self.user_id is not None:
            return f"user {self.user}"
        if self.group_id is not None:
            return f"group {self.group}"
        return f"application {self.application}"

    @property
    def budget(self) -> Budget:
        """Its window as a budget's: where a window starts and ends (the site's calendar)."""
        return Budget(name=f"allowance {self.pk}", window=self.window)

    @property
    def granters(self) -> str:
        """The people who granted it, in words: "approver and approver2"."""
        names = [str(given.get("label") or given.get("id")) for given in self.approvals]
        if len(names) <= 1:
            return "".join(names)
        return ", ".join(names[:-1]) + " and " + names[-1]

    def refuses(self, input: Any) -> str | None:
        """Which of its bounds a call's ``input`` passes (in words), else None."""
        for field, allowed in (self.constraints or {}).items():
            if input.get(field) not in list(allowed):
                return f"its {field} is not one the allowance names"
        if self.sum_field:
            counted = amount_of(input, self.sum_field)
            if counted is None:
                return f"its {self.sum_field} is not an amount the allowance can count"
            if self.per_call is not None and counted > self.per_call:
                return f"it asks more than {self.per_call:.2f} a call"
        return None


def amount_of(input: Any, field: str) -> Decimal | None:
    """The call's amount in ``field`` as a ``Decimal`` (None: missing or not a number)."""
    value = input.get(field) if field else None
    if value is None or isinstance(value, bool) or not isinstance(value, int | float | str
                                                                   | Decimal):
        return None
    try:
        number = Decimal(str(value))
    except ArithmeticError:
        return None
    return number if number.is_finite() and number >= 0 else None


class AllowanceCounter(models.Model):
    """One allowance's use in one window: the row a call locks to use it."""

    allowance = models.ForeignKey(Allowance, verbose_name=_("allowance"),
                                  on_delete=models.CASCADE, related_name="counters")
    window_start = models.DateTimeField(_("window start"))

    class Meta:
        verbose_name = _("allowance counter")
        verbose_name_plural = _("allowance counters")
        constraints = [models.UniqueConstraint(fields=["allowance", "window_start"],
                                               name="gt_allowance_counter_unique")]

    def __str__(self) -> str:
        return f"allowance #{self.allowance_id} · {self.window_start:%Y-%m-%d %H:%M}"


class AllowanceUse(models.Model):
    """One call that ran under an allowance: given back when its claim is released."""

    counter = models.ForeignKey(AllowanceCounter, verbose_name=_("counter"),
                                on_delete=models.CASCADE, related_name="uses")
    operation_id = models.UUIDField(_("operation"), null=True, blank=True, db_index=True)
    amount = models.DecimalField(_("amount"), max_digits=20, decimal_places=4, default=0)
    created_at = models.DateTimeField(_("used at"), auto_now_add=True)

    class Meta:
        verbose_name = _("allowance use")
        verbose_name_plural = _("allowance uses")

    def __str__(self) -> str:
        return f"{self.amount} of {self.counter_id} for {self.operation_id}"
