"""Provides the idempotency stage: the call's key, and its input's fingerprint.

The claim itself, and what the key's row says (run, replay, in flight, recover), is the
pipeline's: it is the shape of the call, not a policy (see ``guarded_tools.pipeline``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from guarded_tools.conf import gt_settings
from guarded_tools.core.errors import IdempotencyKeyInvalid, IdempotencyKeyMissing
from guarded_tools.pipeline.stages.base import Call, Stage

if TYPE_CHECKING:
    from guarded_tools.core.definition import Tool


class IdempotencyStage(Stage):
    """Refuses a missing or invalid key; fingerprints the input the key is bound to."""

    name = "idempotency"
    stateless = True

    @classmethod
    def has_work(cls, tool: Tool, hook: str) -> bool:
        if hook == "before_claim":
            return tool.idempotent or bool(tool.confirm_mode)  # neither: nothing to do
        return True

    def before_claim(self, call: Call) -> None:
        inv, tool = call.inv, call.tool
        if tool.idempotent:
            inv.key = self.resolve_key(call)
        if tool.idempotent or tool.confirm_mode:
            call.fingerprint()
        if tool.idempotent and callable(tool.idempotency_key):  # such a key exists only now
            call.look_up_replay(inv.key)

    def resolve_key(self, call: Call) -> str:
        inv, spec = call.inv, call.tool.idempotency_key
        key: Any = spec(inv.input, context=inv.context) if callable(spec) else (
            call.given_key())
        if key is None or key == "":
            raise IdempotencyKeyMissing(repair={
                "action": "change_input",
                "fields": [spec] if isinstance(spec, str) else [],
                "instruction": "Send a new unique key (a UUID)"
                + (f" in the {gt_settings.IDEMPOTENCY_HEADER} header" if spec is None else "")
                + " and reuse it on every retry.",
            })
        if (not isinstance(key, str) or len(key) > gt_settings.MAX_KEY_LENGTH
                or not key.isprintable() or not key.strip()):
            raise IdempotencyKeyInvalid()
        return key
