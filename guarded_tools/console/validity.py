"""Provides whether a waiting request would still pass its tool's precheck, checked now.

The approver's page runs the tool's ``precheck`` again when it is opened (a balance spent
meanwhile, an authorization gone stale, a receiver deleted): with the stored input, the
requester as the user and the context the pipeline resolves for them
(:meth:`guarded_tools.pipeline.Pipeline.check_preconditions`, the very stage the call
passed when it was asked). The tool's ``ToolError`` is shown in its own words, bounded;
any other exception reads "could not be checked now" and goes to the log, never its text.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.utils.translation import gettext as _

from guarded_tools.core.call import Invocation
from guarded_tools.core.errors import ToolError
from guarded_tools.models import Confirmation
from guarded_tools.pipeline import get_pipeline
from guarded_tools.tools.registry import registry

logger = logging.getLogger("guarded_tools.console")

#: The longest precheck message shown (in characters); longer ones end with "…".
MESSAGE_MAX_CHARS = 300


@dataclass(frozen=True)
class Validity:
    """The precheck's answer now: ``state`` is "passes", "fails" or "unchecked"."""

    state: str
    text: str


def _bounded(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MESSAGE_MAX_CHARS else text[: MESSAGE_MAX_CHARS - 1] + "…"


def check_now(confirmation: Confirmation) -> Validity | None:
    """The tool's precheck of ``confirmation`` run now; None for a tool without one."""
    definition = registry.find(confirmation.tool)
    if definition is None or definition.precheck is None:
        return None
    pipeline = get_pipeline(definition)
    inv = Invocation(input=confirmation.input, user=confirmation.requested_by,
                     scope=confirmation.scope)
    try:
        inv.context = pipeline.resolve_context(inv)
        pipeline.check_preconditions(inv)
    except ToolError as exc:
        why = _bounded(exc.text("message"))
        return Validity("fails", _("Would fail now: %(why)s") % {"why": why})
    except Exception:  # its text may hold what no page should show; the log has it
        logger.exception("precheck of confirmation %s could not run", confirmation.pk)
        return Validity("unchecked", _("Could not be checked now; the log has why."))
    return Validity("passes", _("Checked now: it would pass the tool's precheck."))


__all__ = ["Validity", "check_now"]
