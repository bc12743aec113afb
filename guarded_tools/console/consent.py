"""Provides consent by the user themself (``confirm="owner"``): the page where they decide.

Like 3-D Secure: the agent's call names a page of the site; the person whose account the
agent acts for opens it in their own signed-in session and approves or declines. No
client can decide for them, not even a browser agent that holds their session: a decision
needs the user to verify themself at that moment (``CONSENT_STEP_UP``, by default their
password through Django's ``authenticate()``), which the session alone cannot supply. No
staff member can decide either (:func:`guarded_tools.confirmations.queue.can_decide`). Decisions
go through :func:`guarded_tools.confirmations.queue.approve` / ``decline``, so they write the
same
audit rows as a staff member's in the admin, with how the user was verified. The page
refuses to be framed (``X-Frame-Options: DENY``) whatever the site's middleware.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth import authenticate
from django.contrib.auth.views import redirect_to_login
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.views import View
from django.views.decorators.clickjacking import xframe_options_deny
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.debug import sensitive_post_parameters

from guarded_tools.conf import gt_settings
from guarded_tools.confirmations import allowances
from guarded_tools.confirmations import queue as confirmations
from guarded_tools.core import credentials
from guarded_tools.core.registry import registry
from guarded_tools.models import Confirmation, ConfirmationStatus

__all__ = ["ConsentView", "PasswordStepUp"]

REASON_MAX_CHARS = 2000
logger = logging.getLogger("guarded_tools.consent")


class PasswordStepUp:
    """The default ``CONSENT_STEP_UP``: the user types their password, which Django's
    ``authenticate()`` checks (every ``AUTHENTICATION_BACKENDS``, and its
    ``user_login_failed`` signal for a site's lockout on a wrong one).

    A step-up is any class (or callable) whose instances have:

    - ``render(request, confirmation) -> SafeString``: the field(s) the page shows inside
      its form, above the buttons;
    - ``verify(request, confirmation) -> str``: checks the POST; returns a short label of
      how the user was verified (``"password"``, ``"totp"``, ``"passkey"``), kept in the
      audit trail, or raises ``django.core.exceptions.ValidationError`` with a message
      for the user (nothing is decided; the request stays pending).
    """

    label = "password"
    field = "password"

    def render(self, request: HttpRequest, confirmation: Confirmation) -> SafeString:
        return format_html(
            '<p><label for="gt-step-up">{}</label><br><input type="password" id="gt-step-up"'
            ' name="{}" autocomplete="off" required data-testid="step-up"></p>',
            _("Your password (an agent using your browser cannot supply it)"), self.field)

    def verify(self, request: HttpRequest, confirmation: Confirmation) -> str:
        password = request.POST.get(self.field, "")
        if not password:
            raise ValidationError(_("Type your password to approve or decline; nothing was"
                                    " decided."))
        user = authenticate(request, username=request.user.get_username(), password=password)
        if user is None or user.pk != request.user.pk:
            raise ValidationError(_("That password is not right; nothing was decided."))
        return self.label


def step_up() -> Any:
    """The site's step-up (``CONSENT_STEP_UP``), made for one request."""
    return gt_settings.CONSENT_STEP_UP()


def _failures_key(request: HttpRequest) -> str:
    return f"guarded_tools:consent-step-up:{request.user.pk}"


def locked_out(request: HttpRequest) -> bool:
    """Whether this user used up their failed step-ups for now (Django's cache: a cache
    every process shares makes the limit hold across processes)."""
    failures = cache.get(_failures_key(request), 0)
    return bool(failures >= gt_settings.CONSENT_STEP_UP_FAILURES)


def record_failure(request: HttpRequest, confirmation: Confirmation) -> None:
    key = _failures_key(request)
    cache.add(key, 0, gt_settings.CONSENT_STEP_UP_LOCKOUT_SECONDS)  # the window opens
    try:
        cache.incr(key)
    except ValueError:  # expired between the two calls: this failure opens a new window
        cache.add(key, 1, gt_settings.CONSENT_STEP_UP_LOCKOUT_SECONDS)
    logger.warning("consent step-up failed for user %s on confirmation %s",
                   request.user.pk, confirmation.pk)


def present_request(confirmation: Confirmation, user: Any = None) -> dict[str, Any]:
    """How the consent page shows a request: the tool, what it does, and the request as
    people read it (``guarded_tools.confirmations.presentation``, as the approver's page does: the
    tool's one-line summary, and its input under the schema's titles with the objects it
    names resolved), shown once and bounded."""
    from guarded_tools.confirmations.presentation import FIELDS_SHOWN
    from guarded_tools.confirmations.presentation import present_request as present

    definition = registry.find(confirmation.tool)
    presented = present(confirmation, confirmation.input, user)
    count = len(confirmation.input) if isinstance(confirmation.input, dict) else 1
    # The idempotency key is the agent's bookkeeping, not part of what the user decides.
    key_field = definition.key_field if definition else None
    return {
        "title": definition.annotations["title"] if definition else confirmation.tool,
        "tool": confirmation.tool,
        "description": definition.description if definition else "",
        "summary": presented.summary,
        "fields": [f for f in presented.fields if f.name != key_field],
        "not_shown": max(0, count - min(count, FIELDS_SHOWN)),
    }


def who_asks(confirmation: Confirmation) -> str:
    """Who asks, as the user knows them: the OAuth application they authorized, an agent
    with their API token, or a program in their signed-in session
    (``Confirmation.credential``, re-checked by :func:`confirmations.live_credential`)."""
    reference = confirmation.credential
    if not reference:
        return _("a program using your signed-in session")
    if reference.startswith(credentials.DRF_TOKEN):
        return _("an agent using your API token")
    try:
        token = confirmations.live_credential(confirmation)
    except credentials.CredentialRevoked:
        return _("an application whose access you have since revoked")
    name = getattr(getattr(token, "application", None), "name", "")
    if name:
        return _("%(name)s, an application you authorized") % {"name": name}
    return _("an application you authorized")


def lapsed(confirmation: Confirmation) -> bool:
    """Whether nobody decided in time (expired, or pending past its deadline)."""
    return confirmation.status == ConfirmationStatus.EXPIRED or (
        confirmation.status == ConfirmationStatus.PENDING
        and confirmation.expires_at <= timezone.now())


def decision_text(confirmation: Confirmation) -> str:
    """What happens next, once the request is decided (or lapsed)."""
    status = confirmation.status
    if status == ConfirmationStatus.APPROVED:
        if confirmations.runs_when_approved(confirmation):
            return _("It runs now; your agent gets its result when it asks again.")
        return _("Nothing has run yet: when your agent asks again, it runs once.")
    if status == ConfirmationStatus.CONSUMED:
        return _("It has run once, as you approved; it will not run again.")
    if status == ConfirmationStatus.DECLINED:
        return _("Nothing ran, and nothing will: your agent is told you declined.")
    if status == ConfirmationStatus.WITHDRAWN:
        return _("It was withdrawn before anyone decided, so nothing ran.")
    if lapsed(confirmation):
        return _("Nobody decided in time, so nothing ran; your agent has to ask again.")
    return ""


@method_decorator(xframe_options_deny, name="dispatch")
@method_decorator(csrf_protect, name="dispatch")
@method_decorator(sensitive_post_parameters(), name="post")
class ConsentView(View):
    """``GET/POST confirmations/<id>/consent/``: the requester's own approval page.

    Anyone else, signed in or not (once signed in), gets a 404: the page does not say
    whether another user's request exists. A decision needs the step-up
    (``CONSENT_STEP_UP``); a failed one decides nothing, and after
    ``CONSENT_STEP_UP_FAILURES`` of them the page refuses more for
    ``CONSENT_STEP_UP_LOCKOUT_SECONDS``.
    """

    template_name = "guarded_tools/consent.html"

    def _confirmation(self, request: HttpRequest, pk: Any) -> Confirmation:
        confirmation = Confirmation.objects.filter(pk=pk).select_related("requested_by").first()
        definition = registry.find(confirmation.tool) if confirmation is not None else None
        if (
            confirmation is None
            or definition is None
            or not confirmations.owner_decides(confirmation)
            or confirmation.requested_by_id != request.user.pk
        ):
            raise Http404("No such request.")
        return confirmation

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        return super().dispatch(request, *args, **kwargs)

    def page(self, request: HttpRequest, confirmation: Confirmation, *, status: int = 200,
             **context: Any) -> HttpResponse:
        open_ = (confirmation.status == ConfirmationStatus.PENDING
                 and Confirmation.objects.pending().filter(pk=confirmation.pk).exists())
        context.setdefault("open", open_)
        offer = allowance_offer(confirmation) if context["open"] else None
        if offer is not None:
            context.update(offer=offer, offer_bounds=allowances.bounds_text(offer))
        return render(request, self.template_name, {
            "confirmation": confirmation,
            "request_shown": present_request(confirmation, request.user),
            "who_asks": who_asks(confirmation),
            "next_step": "" if context["open"] else decision_text(confirmation),
            "lapsed": lapsed(confirmation),
            "step_up": step_up().render(request, confirmation) if context["open"] else "",
            **context,
        }, status=status)

    def get(self, request: HttpRequest, pk: Any) -> HttpResponse:
        confirmation = self._confirmation(request, pk)
        return self.page(request, confirmation, done=request.GET.get("done") == "1")

    def post(self, request: HttpRequest, pk: Any) -> HttpResponse:
        confirmation = self._confirmation(request, pk)
        decision = request.POST.get("decision")
        reason = request.POST.get("reason", "")[:REASON_MAX_CHARS]
        if decision not in ("approve", "decline"):
            return self.page(request, confirmation, status=400,
                             step_up_error=_("Choose approve or decline."))
        if locked_out(request):
            return self.page(request, confirmation, status=429, step_up_error=_(
                "Too many failed attempts to verify it is you; nothing was decided. Try"
                " again later."))
        try:
            verified_by = step_up().verify(request, confirmation)
        except ValidationError as exc:
            record_failure(request, confirmation)
            return self.page(request, confirmation, status=403,
                             step_up_error=" ".join(exc.messages))
        cache.delete(_failures_key(request))
        try:
            if decision == "approve":
                confirmations.approve(confirmation, request.user, reason,
                                      verified_by=verified_by)
                if request.POST.get("allow") == "1":
                    self.grant_allowance(request, confirmation, reason, verified_by)
            else:
                confirmations.decline(confirmation, request.user,
                                      reason.strip() or "Declined by the user.",
                                      verified_by=verified_by)
        except confirmations.DecisionRefused as exc:
            return self.page(request, confirmation, status=409, open=False, refusal=str(exc))
        return HttpResponseRedirect(f"{request.path}?done=1")

    def grant_allowance(self, request: HttpRequest, confirmation: Confirmation, note: str,
                        verified_by: str) -> None:
        """The owner's allowance for calls like this one, with the bounds they chose and
        the same step-up as their approval (an offer the policy no longer makes: none)."""
        offer = allowance_offer(confirmation, status=ConfirmationStatus.APPROVED)
        if offer is None:
            return
        try:
            offer.count = max(1, min(int(request.POST.get("allow_count") or 1), 1000))
            days = max(1, min(int(request.POST.get("allow_days") or 30), 366))
            if offer.sum_field and request.POST.get("allow_per_call"):
                offer.per_call = Decimal(request.POST["allow_per_call"])
        except (ValueError, ArithmeticError):
            return
        offer.expires_at = timezone.now() + timedelta(days=days)
        try:
            allowances.propose(offer, request.user, base=confirmation.input, note=note,
                               verified_by=verified_by)
        except allowances.GrantRefused:
            logger.info("allowance not granted from consent page of %s", confirmation.pk)


def allowance_offer(confirmation: Confirmation, *, status: str = ConfirmationStatus.PENDING
                    ) -> Any:
    """An allowance the owner may grant themself for calls like ``confirmation``'s: its
    rule is ``Owner(allowances=True)`` for every call within the offer's bounds; else
    None."""
    if confirmation.status != status or confirmation.requested_by_id is None:
        return None
    offer = allowances.like_request(confirmation)
    needed = allowances.requirement(offer, confirmation.input)
    return offer if not needed.problem and needed.n == 0 else None
