"""Provides consent by the user themself (``confirm="owner"``): the page where they decide.

Like 3-D Secure: the agent's call names a page of the site; the person whose account the
agent acts for opens it in their own signed-in session and approves or declines. No
client can decide for them (the page needs their login and Django's CSRF token), and no
staff member either (:func:`guarded_tools.confirmations.can_decide`). Decisions go
through :func:`guarded_tools.confirmations.approve` / ``decline``, so they write the same
audit rows as a staff member's in the admin.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.debug import sensitive_post_parameters

from guarded_tools import confirmations, hosts
from guarded_tools.models import Confirmation, ConfirmationStatus
from guarded_tools.registry import registry

URL_NAME = "confirmation-consent"
REASON_MAX_CHARS = 2000


def consent_url(request: Any, confirmation: Confirmation) -> str:
    """The consent page of ``confirmation``: absolute on a host the site owns."""
    path = hosts.app_path(request, URL_NAME, confirmation.pk)
    return hosts.absolute_url(request, path) if request is not None else path


def present_request(confirmation: Confirmation, user: Any = None) -> dict[str, Any]:
    """How the consent page shows a request: the tool, what it does, and the request as
    people read it (``guarded_tools.presentation``, as the approver's page does: the
    tool's one-line summary, and its input under the schema's titles with the objects it
    names resolved), shown once and bounded."""
    from guarded_tools.presentation import FIELDS_SHOWN
    from guarded_tools.presentation import present_request as present

    definition = registry.find(confirmation.tool)
    presented = present(confirmation, confirmation.input, user)
    count = len(confirmation.input) if isinstance(confirmation.input, dict) else 1
    return {
        "title": definition.annotations["title"] if definition else confirmation.tool,
        "tool": confirmation.tool,
        "description": definition.description if definition else "",
        "summary": presented.summary,
        "fields": presented.fields,
        "not_shown": max(0, count - min(count, FIELDS_SHOWN)),
    }


@method_decorator(csrf_protect, name="dispatch")
@method_decorator(sensitive_post_parameters("reason"), name="post")
class ConsentView(View):
    """``GET/POST confirmations/<id>/consent/``: the requester's own approval page.

    Anyone else, signed in or not (once signed in), gets a 404: the page does not say
    whether another user's request exists.
    """

    template_name = "guarded_tools/consent.html"

    def _confirmation(self, request: HttpRequest, pk: Any) -> Confirmation:
        confirmation = Confirmation.objects.filter(pk=pk).select_related("requested_by").first()
        definition = registry.find(confirmation.tool) if confirmation is not None else None
        if (
            confirmation is None
            or definition is None
            or not definition.owner_consent
            or confirmation.requested_by_id != request.user.pk
        ):
            raise Http404("No such request.")
        return confirmation

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        return super().dispatch(request, *args, **kwargs)

    def get(self, request: HttpRequest, pk: Any) -> HttpResponse:
        confirmation = self._confirmation(request, pk)
        open_ = (confirmation.status == ConfirmationStatus.PENDING
                 and Confirmation.objects.pending().filter(pk=confirmation.pk).exists())
        return render(request, self.template_name, {
            "confirmation": confirmation,
            "request_shown": present_request(confirmation, request.user),
            "open": open_,
            "done": request.GET.get("done") == "1",
        })

    def post(self, request: HttpRequest, pk: Any) -> HttpResponse:
        confirmation = self._confirmation(request, pk)
        decision = request.POST.get("decision")
        reason = request.POST.get("reason", "")[:REASON_MAX_CHARS]
        try:
            if decision == "approve":
                confirmations.approve(confirmation, request.user, reason)
            elif decision == "decline":
                confirmations.decline(confirmation, request.user,
                                      reason.strip() or "Declined by the user.")
            else:
                raise confirmations.DecisionRefused("Choose approve or decline.")
        except confirmations.DecisionRefused as exc:
            return render(request, self.template_name, {
                "confirmation": confirmation,
                "request_shown": present_request(confirmation, request.user),
                "open": False,
                "refusal": str(exc),
            }, status=409)
        return HttpResponseRedirect(f"{request.path}?done=1")
