"""Provides approval policies: a tool's ordered rules, each with an outcome stated in words.

A policy is the declarative form of ``confirm=``: the first rule whose ``when`` holds for
the call decides it (``when=None`` always holds). Its outcome is ``Run()`` (no person),
``Owner()`` (the user the call acts for decides, as ``confirm="owner"``),
``Approvers(n, group=, permission=)`` (n distinct people, none the requester) or
``Refuse(code, repair)``. The rules carry their own ``description``, so the tool listing
states the policy in words an agent can plan with; the rule that decided and the
policy's ``version`` are stored with the confirmation. No database here: the pipeline
hands ``history`` (the caller's recent operations of the tool) to ``when``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, ClassVar

from django.utils import timezone


@dataclass(frozen=True)
class Run:
    """No person is asked: the call runs (the rule is recorded in its events)."""

    strictness: ClassVar[float] = 0


@dataclass(frozen=True)
class Owner:
    """The user the call acts for decides, on the site's consent page (as
    ``confirm="owner"``): no staff member can decide it.

    Stricter than ``Run`` and laxer than ``Approvers``: a request asked of the owner
    that the policy now gives to approvers needs the approvers; one asked of approvers
    stays with them when the policy now asks the owner.
    """

    strictness: ClassVar[float] = 0.5
    #: The owner may grant an allowance for their own account on the consent page.
    allowances: bool = False


@dataclass(frozen=True)
class Approvers:
    """``n`` distinct approvers (never the requester), optionally from a group or holding
    a permission besides the approve permission.

    ``allowances=True`` lets people who could approve such a call grant a standing
    approval (an ``Allowance``): bounded calls of one principal then run without asking.
    """

    n: int = 1
    group: str | None = None
    permission: str | None = None
    allowances: bool = False

    @property
    def strictness(self) -> float:
        return self.n


@dataclass(frozen=True)
class Refuse:
    """The call is refused with an error of the guard's catalog and a repair."""

    code: str = "authorization_denied"
    repair: Mapping[str, Any] | None = None
    strictness: ClassVar[float] = 1_000_000


Outcome = Run | Owner | Approvers | Refuse
#: A budget's ``escalate``: the people an over-budget call waits for.
ESCALATIONS = (Owner, Approvers)


@dataclass(frozen=True, kw_only=True)
class Rule:
    """One rule: when ``when(input=, user=, history=)`` holds, ``outcome`` applies."""

    outcome: Outcome
    description: str
    when: Callable[..., Any] | None = None
    #: How the rule is named in 202s, refusals, the admin and the audit trail.
    name: str = ""

    @property
    def label(self) -> str:
        return self.name or self.description


DAY = 86_400
WEEK = 7 * DAY
#: The site's calendar windows (``Budget(window=...)``), each with its length in seconds
#: (a month's: the longest one, an upper bound).
CALENDAR = {"day": DAY, "week": WEEK, "month": 31 * DAY}
#: Windows of whole days count from this Monday, so that weeks start on Mondays.
FIRST_MONDAY = date(1970, 1, 5)


def site_zone() -> Any:
    """The site's time zone (``TIME_ZONE``), in which a budget's days, weeks and months
    are counted, whatever zone the current request has activated."""
    return timezone.get_default_timezone()


def site_midnight(day: date) -> datetime:
    """The instant ``day`` starts in the site's time zone, in UTC. Where the clocks skip
    midnight (a daylight saving change at 00:00), the first instant of the day."""
    return datetime.combine(day, time(0), tzinfo=site_zone()).astimezone(UTC)


def site_date(instant: datetime) -> date:
    """The site's calendar date at ``instant`` (a naive one is read in the site's zone)."""
    if timezone.is_naive(instant):
        return instant.date()
    return instant.astimezone(site_zone()).date()


@dataclass(frozen=True, kw_only=True)
class Budget:
    """A limit per principal per window (on the database clock): a count of calls
    (``count``) and/or a sum of an input field (``sum_field`` up to ``limit``).

    ``name`` is shared by the tools that declare the same budget (a group of tools).
    ``escalate`` is the rule that applies instead of a refusal (for example
    ``Approvers(2)``): the call then waits for those people rather than being refused.

    The window: ``window="day"``, ``"week"`` or ``"month"``, or ``window_seconds``. Days,
    weeks and months are the site's (``TIME_ZONE``): a day starts at midnight there (23 or
    25 hours long when the clocks change), a week on Monday at midnight, a month on the
    1st; so does any ``window_seconds`` of whole days (86,400 a day, 604,800 a week; n days
    count from Monday 5 January 1970). Other windows (a minute, an hour) are multiples of
    their length since the epoch.
    """

    name: str
    window_seconds: int = DAY
    count: int | None = None
    sum_field: str | None = None
    limit: float | None = None
    escalate: Outcome | None = None
    description: str = ""
    #: ``"day"``, ``"week"`` or ``"month"`` of the site's calendar (sets ``window_seconds``).
    window: str = ""
    #: Percentages of the count or the sum at which the people who manage budgets are told
    #: (once per window and principal each): ``()`` tells nobody.
    alerts: Sequence[int] = (80, 100)

    def __post_init__(self) -> None:
        object.__setattr__(self, "alerts", tuple(self.alerts))
        if self.window in CALENDAR:
            object.__setattr__(self, "window_seconds", CALENDAR[self.window])

    @property
    def days(self) -> int:
        """The window's length in the site's calendar days (0: not a calendar window; a
        month is one of its own)."""
        if self.window == "month" or self.window_seconds <= 0:
            return 0
        return self.window_seconds // DAY if self.window_seconds % DAY == 0 else 0

    @property
    def per(self) -> str:
        """The window as a person says it after "per": "day", "week", "month", "3 days";
        a window that is not the calendar's, in seconds ("60 seconds")."""
        if self.window == "month":
            return "month"
        days = self.days
        if days:
            return {1: "day", 7: "week"}.get(days, f"{days} days")
        return f"{self.window_seconds} seconds"

    def window_start(self, now: datetime) -> datetime:
        """When the window ``now`` falls in started (aware, UTC)."""
        if self.window == "month":
            return site_midnight(site_date(now).replace(day=1))
        days = self.days
        if days:
            since = (site_date(now) - FIRST_MONDAY).days // days * days
            return site_midnight(FIRST_MONDAY + timedelta(days=since))
        seconds = self.window_seconds
        return datetime.fromtimestamp(now.timestamp() // seconds * seconds, tz=UTC)

    def window_end(self, start: datetime) -> datetime:
        """When the window that started at ``start`` ends and frees what it counted: the
        next window's start (the site's next midnight, Monday or 1st for its calendar)."""
        if self.window == "month":
            first = site_date(start)
            return site_midnight(date(first.year + first.month // 12, first.month % 12 + 1, 1))
        days = self.days
        if days:
            return site_midnight(site_date(start) + timedelta(days=days))
        return start + timedelta(seconds=self.window_seconds)


@dataclass(frozen=True, kw_only=True)
class Policy:
    """Ordered rules; the first that holds decides. A call no rule matches is refused."""

    rules: Sequence[Rule] = field(default_factory=tuple)
    #: Limits per principal, reserved atomically after the claim (the budget stage).
    budgets: Sequence[Budget] = field(default_factory=tuple)
    version: str = "1"
    #: The policy in words for the listing; else the rules' descriptions joined.
    describe: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "rules", tuple(self.rules))
        object.__setattr__(self, "budgets", tuple(self.budgets))

    @property
    def text(self) -> str:
        parts = [rule.description for rule in self.rules]
        parts += [budget.description for budget in self.budgets if budget.description]
        text = self.describe or "; ".join(part.rstrip(".") for part in parts) + "."
        if any(isinstance(rule.outcome, Owner) for rule in self.rules) and not self.describe:
            text += (" Where the user's own approval is needed, nobody else can give it: the"
                     " 202 carries confirmation.url, the page where the user approves.")
        return text

    def decide(self, *, input: Mapping[str, Any], user: Any, history: Any) -> Rule:
        for rule in self.rules:
            if rule.when is None or rule.when(input=input, user=user, history=history):
                return rule
        return Rule(outcome=Refuse(), description="No rule of the policy allows this call.",
                    name="no rule matched")

    def problems(self) -> list[str]:
        """What is wrong with the policy as declared (for the tool's system check)."""
        found = [f"rule {rule.label!r} has no outcome Run(), Owner(), Approvers(n) or Refuse()"
                 for rule in self.rules
                 if not isinstance(rule.outcome, Run | Owner | Approvers | Refuse)]
        found += [f"rule {rule.label!r} asks for {rule.outcome.n} approvers" for rule in self.rules
                  if isinstance(rule.outcome, Approvers) and rule.outcome.n < 1]
        found += [f"budget {budget.name!r} escalates to {budget.escalate!r}, not to people"
                  f" (Owner() or Approvers(n))" for budget in self.budgets
                  if budget.escalate is not None and not isinstance(budget.escalate, ESCALATIONS)]
        found += [f"budget {budget.name!r} has the window {budget.window!r}, not \"day\","
                  f" \"week\" or \"month\"" for budget in self.budgets
                  if budget.window and budget.window not in CALENDAR]
        found += [f"budget {budget.name!r} has a window of {budget.window_seconds} seconds"
                  for budget in self.budgets if not budget.window and budget.window_seconds < 1]
        found += [f"budget {budget.name!r} alerts at {percent} %, not a whole number from 1"
                  f" to 1000" for budget in self.budgets for percent in budget.alerts
                  if isinstance(percent, bool) or not isinstance(percent, int)
                  or not 1 <= percent <= 1000]
        return found


def stricter(a: Rule, b: Rule) -> Rule:
    """The stricter of two decisions (a refusal, then more approvers, then the owner,
    then running)."""
    return b if b.outcome.strictness > a.outcome.strictness else a


__all__ = ["Approvers", "Budget", "Owner", "Policy", "Refuse", "Rule", "Run", "site_zone",
           "stricter"]
