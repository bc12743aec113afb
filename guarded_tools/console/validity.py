"""Provides whether a waiting request would still pass its tool's precheck, checked now.

The approver's page runs the tool's ``precheck`` again when it is opened (a balance spent
meanwhile, an authorization gone stale, a receiver deleted): with the stored input, the
requester as the user and the context the pipeline resolves for them
(:meth:`guarded_tools.pipeline.Pipeline.check_preconditions`, the very stage the call
passed when it was asked). The tool's ``ToolError`` is shown in its own words, bounded;
any other exception reads "could not be checked now" and goes to the log, never its text.

A request that would fail now also says what an approval given now covers. An approval is
bound to the input the approver saw (the whole input, or the fields a tool names as its
``intent``): a repair that changes the world and leaves that input alone (``refresh_state``,
``call_tool``, a retry, a new value of a field outside the intent) keeps it, and the
agent's repaired retry runs with it; a repair that changes that input (``change_input``,
a plan's ``update`` of an approved field) makes another call, which asks for a new
approval.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.utils.translation import gettext as _

from guarded_tools.core.call import Invocation
from guarded_tools.core.definition import Tool
from guarded_tools.core.errors import ToolError
from guarded_tools.core.registry import registry
from guarded_tools.core.repair import Repair, RepairPlan
from guarded_tools.models import Confirmation
from guarded_tools.pipeline.gateway import Gateway

logger = logging.getLogger("guarded_tools.console")

#: The longest precheck message shown (in characters); longer ones end with "…".
MESSAGE_MAX_CHARS = 300


#: Repair actions that change the world, not the call's input: an approval survives them.
WORLD_ACTIONS = ("refresh_state", "call_tool", "retry_same_operation")


@dataclass(frozen=True)
class Validity:
    """The precheck's answer now: ``state`` is "passes", "fails" or "unchecked".

    For a call that fails, ``approval`` says what the tool's repair does to an approval
    given now: "kept" (it changes the world, not the approved input), "new" (it changes
    the approved input: the repaired call asks again) or "" (no repair to judge), and
    ``covers`` says it in a sentence.
    """

    state: str
    text: str
    approval: str = ""
    covers: str = ""

    @property
    def fails(self) -> bool:
        return self.state == "fails"


def _bounded(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MESSAGE_MAX_CHARS else text[: MESSAGE_MAX_CHARS - 1] + "…"


def check_now(confirmation: Confirmation) -> Validity | None:
    """The tool's precheck of ``confirmation`` run now; None for a tool without one."""
    definition = registry.find(confirmation.tool)
    if definition is None or definition.precheck is None:
        return None
    inv = Invocation(input=confirmation.input, user=confirmation.requested_by,
                     scope=confirmation.scope)
    try:
        Gateway(definition).check_preconditions(inv)
    except ToolError as exc:
        why = _bounded(exc.text("message"))
        approval, covers = what_an_approval_covers(definition, exc)
        return Validity("fails", _("Would fail now: %(why)s") % {"why": why}, approval, covers)
    except Exception:  # its text may hold what no page should show; the log has it
        logger.exception("precheck of confirmation %s could not run", confirmation.pk)
        return Validity("unchecked", _("Could not be checked now; the log has why."))
    return Validity("passes", _("Checked now: it would pass the tool's precheck."))


def _bound_to(definition: Tool) -> str:
    if definition.intent is None:
        return _("An approval is bound to the whole input shown here.")
    return _("An approval is bound to %(fields)s as shown here.") % {
        "fields": _and(definition.intent)}


def _and(names: tuple[str, ...] | list[str]) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else _("%(some)s and %(last)s") % {
        "some": ", ".join(names[:-1]), "last": names[-1]}


def _changed_fields(repair: Repair | RepairPlan) -> tuple[bool, set[str]]:
    """Whether ``repair`` changes the call's input, and the fields it names (none: any)."""
    steps = repair.steps if isinstance(repair, RepairPlan) else (repair,)
    update = set(repair.update) if isinstance(repair, RepairPlan) else set()
    changing = [step for step in steps if step.action not in WORLD_ACTIONS]
    if not changing and not update:
        return False, set()
    named = update.union(*(step.fields for step in changing))
    unnamed = any(step.action == "change_input" and not step.fields for step in changing)
    return True, set() if unnamed else named


def what_an_approval_covers(definition: Tool, error: ToolError) -> tuple[str, str]:
    """("kept" | "new" | "", a sentence): what the repair ``error`` asks for does to an
    approval of this call given now."""
    bound = _bound_to(definition)
    repair = error.repair_for()
    if repair is None:
        return "", bound + " " + _(
            "The tool names no repair: the agent's retry with it fails the same way unless"
            " what the tool checks changes first.")
    steps = repair.steps if isinstance(repair, RepairPlan) else (repair,)
    if all(step.action in ("stop", "reconcile") for step in steps):
        return "", bound + " " + _(
            "The tool tells the agent to stop: no retry uses an approval given now.")
    changes_input, fields = _changed_fields(repair)
    approved = set(definition.intent) if definition.intent is not None else None
    if changes_input and (approved is None or not fields or fields & approved):
        changed = sorted(fields & approved if approved is not None else fields)
        return "new", bound + " " + _(
            "The repair the tool asks for changes %(what)s, so the repaired call asks for a"
            " new approval: an approval given now covers only this call, which would fail."
        ) % {"what": _and(changed) if changed else _("the input")}
    also = (_(" (and gives a new %(fields)s)") % {"fields": _and(sorted(fields))}) \
        if fields else ""
    return "kept", bound + " " + _(
        "The repair the tool asks for changes the state it checks%(also)s, leaving those"
        " alone, so an approval given now is kept: the agent's repaired retry runs with it."
    ) % {"also": also}


__all__ = ["Validity", "check_now", "what_an_approval_covers"]
