"""Provides the validation stage: the input against the tool's JSON Schema."""

from __future__ import annotations

from guarded_tools.conf import gt_settings
from guarded_tools.core.schema.validation import validate
from guarded_tools.pipeline.stages.base import Call, Stage


class ValidationStage(Stage):
    """Refuses an input its schema refuses (``invalid_input``, with the issues).

    A replay answered from the replay cache for the very input answered (the same
    fingerprint) skips it: that input passed this validator when it was answered.
    """

    name = "validation"
    stateless = True

    def before_claim(self, call: Call) -> None:
        remembered, inv = call.remembered, call.inv
        if remembered is not None and remembered.fingerprint == inv.fingerprint:
            return
        accepts = call.tool.accepts
        if accepts is not None and accepts(inv.input):
            return  # certainly valid: the validator would find no issue
        validate(call.tool.validator, inv.input, known=call.tool.schema_names,
                 max_issues=gt_settings.MAX_ISSUES)
