"""Provides the authorization stage: Django permissions, then the tool's ``authorize``.

Every call, replays included. Permissions are asked as everywhere else in Django,
``user.has_perms(...)``: a site that wants them in one query lists
``guarded_tools.auth_backends.OneQueryModelBackend`` in ``AUTHENTICATION_BACKENDS``.
The token's scopes come first: each kind of credential that checks scopes is asked
(:func:`guarded_tools.core.credentials.check_scopes`; django-oauth-toolkit's kind where it
is installed).
"""

from __future__ import annotations

from typing import Any

from guarded_tools.core import credentials
from guarded_tools.core.errors import AuthorizationError, NotAuthenticated
from guarded_tools.pipeline.stages.base import Call, Stage, decision


class AuthorizationStage(Stage):
    """Refuses a caller without the tool's permissions, or whom ``authorize`` refuses."""

    name = "authorization"
    stateless = True

    def before_claim(self, call: Call) -> None:
        if self.check(call):
            call.events.emit("authorized")

    def on_read(self, call: Call) -> None:
        self.check(call)

    def check(self, call: Call) -> bool:
        """Whether anything was checked (refusals raise)."""
        inv, tool = call.inv, call.tool
        credentials.check_scopes(tool, inv.request, inv.credential)
        if tool.permissions:
            user = inv.user
            if user is None or not getattr(user, "is_authenticated", False):
                raise NotAuthenticated()
            if not user.has_perms(tool.permissions):
                raise AuthorizationError()
        if tool.authorize is not None:
            allowed, _reason = decision(self.authorize(call), "allowed")
            if not allowed:
                # The reason is application text about the caller's request; it is
                # logged, not sent, so that no data about other objects leaks.
                raise AuthorizationError()
        return bool(tool.permissions) or tool.authorize is not None

    def authorize(self, call: Call) -> Any:
        inv, authorize = call.inv, call.tool.authorize
        assert authorize is not None
        return authorize(input=inv.input, context=inv.context, user=inv.user,
                         signal=call.signal)
