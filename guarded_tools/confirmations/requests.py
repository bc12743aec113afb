"""Provides what a confirmation request says: what it is bound to, who asks, with
which credential, and how it stands (``1 of 2 approvals given``).

The queue (:mod:`guarded_tools.confirmations.queue`) stores these with each request
and re-checks the credential when an approval runs the call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db.models import Q

from guarded_tools.confirmations.presentation import summarize
from guarded_tools.core import credentials
from guarded_tools.core.credentials import CredentialRevoked
from guarded_tools.core.repair import normalize
from guarded_tools.core.times import timestamp
from guarded_tools.models import Confirmation
from guarded_tools.store import fingerprint, user_row

if TYPE_CHECKING:
    from guarded_tools.core.call import Invocation
    from guarded_tools.core.definition import Tool



def approved_fingerprint(definition: Tool, inv: Invocation) -> str:
    """What an approval is bound to: the whole input, or only the fields a tool marks as
    its intent (``intent=``), so a repair of the others keeps the approval."""
    if definition.intent is None:
        return inv.fingerprint
    return fingerprint({name: inv.input[name] for name in definition.intent
                        if name in inv.input})


def call_filter(definition: Tool, inv: Invocation) -> Q:
    return Q(tool=definition.name, scope=inv.scope, key=inv.key or "",
             fingerprint=approved_fingerprint(definition, inv))


def describe(confirmation: Confirmation) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": str(confirmation.pk),
        "status": confirmation.status,
        "expires_at": timestamp(confirmation.expires_at),
    }
    if confirmation.policy_rule:
        data["rule"] = confirmation.policy_rule
        data["policy_version"] = confirmation.policy_version
        if asks_the_owner(confirmation):
            data["decides"] = "owner"
        else:
            data["approvals"] = {"given": len(confirmation.approvals),
                                 "required": confirmation.approvals_required}
    return data


def asks_the_owner(confirmation: Confirmation) -> bool:
    """Whether a policy's ``Owner()`` rule asked this request: the user the call acts for
    decides it, as a ``confirm="owner"`` tool's (stored as no staff approvals required)."""
    return bool(confirmation.policy_rule) and confirmation.approvals_required == 0


def approvals_text(confirmation: Confirmation) -> str:
    """``1 of 2 approvals given``: where a request that needs several approvals stands."""
    if asks_the_owner(confirmation):
        return "the user this call acts for decides it"
    return f"{len(confirmation.approvals)} of {confirmation.approvals_required} approvals given"


def pending_message(confirmation: Confirmation) -> str:
    if not confirmation.policy_rule:
        return "A person must approve this call before it runs; nothing has run yet."
    return (f"The approval policy's rule \"{confirmation.policy_rule}\" applies:"
            f" {approvals_text(confirmation)}; nothing has run yet.")


def pending_why(confirmation: Confirmation) -> str | None:
    """Why a call under an approval policy waits, in words true of a policy: its rules
    decide call by call (some may run at once), and this call's rule asks for this much.
    None for a tool with a confirmation mode: its catalog entry says it (every call)."""
    rule = confirmation.policy_rule
    if not rule:
        return None
    lead = ("This tool's approval policy decides call by call whether a call runs at once or"
            f" waits for approval; its rule \"{rule}\" makes this call wait for")
    if asks_the_owner(confirmation):
        return (f"{lead} the user it acts for to approve it themself, on a page of the site"
                " where they are signed in; nobody else can approve it for them. Nothing has"
                " run yet.")
    required = confirmation.approvals_required
    people = ("one staff member's approval" if required == 1
              else f"the approvals of {required} distinct staff members")
    return f"{lead} {people} in the site's admin. Nothing has run yet."


#: The longest requester label kept (``Confirmation.requested_by_label``).
LABEL_MAX_CHARS = 200


def requester_label(inv: Invocation) -> str:
    """Who asks, in words: the principal the call names, the user's name (its
    ``get_username()``, or its ``str()`` where its class defines one), else the scope
    its keys live in (a user object with no name, an anonymous caller)."""
    user = inv.user
    label = inv.principal or ""
    if not label and getattr(user, "is_authenticated", False):
        if callable(getattr(user, "get_username", None)):
            label = str(user.get_username())
        elif type(user).__str__ is not object.__str__:
            label = str(user)
    return normalize(label or inv.scope, LABEL_MAX_CHARS)


def requested(definition: Tool, inv: Invocation) -> dict[str, Any]:
    """A new request's requester and its summary as it reads now, to store with it.

    The summary is presented for nobody in particular (no person is looking yet), so a
    ``present`` hook that words a request for its viewer words it for everyone.
    """
    return {"requested_by": user_row(inv.user), "requested_by_label": requester_label(inv),
            "summary": summarize(definition, inv.input), "credential": credential_of(inv)}


def credential_of(inv: Invocation) -> str:
    """What the call authenticated with, to re-check when an approval runs it.

    An OAuth grant (or token), a digest of a DRF token (each kind registered in
    :mod:`guarded_tools.credentials`); blank for a session or a call in code,
    whose run re-checks only that the user is still active.
    """
    return credentials.reference(getattr(inv.request, "auth", None))


def live_credential(confirmation: Confirmation) -> Any:
    """The credential the call was requested with, re-checked: its OAuth access token
    (None for another kind), or ``CredentialRevoked``."""
    user = confirmation.requested_by
    if user is not None and not getattr(user, "is_active", True):
        raise CredentialRevoked()
    if confirmation.credential:
        return credentials.live(confirmation.credential, user)
    return None
