"""``python -m bench.micro``: microseconds per call of validation and of rendering a repair plan.

In process, no database: schema validation with the validator built once (as the
tool registry does; never ``jsonschema.validate()``, which rebuilds it each call),
for a valid input and for an invalid one (its issues built and bounded), and the
agent-facing message of a five-step repair plan, alone and as a whole error body.
Each figure is the median of several repeats of a timed loop. Prints one JSON object.
"""

from __future__ import annotations

import json
import os
import statistics
import timeit
from collections.abc import Callable
from typing import Any


def per_call_us(fn: Callable[[], Any], number: int, repeat: int = 7) -> float:
    runs = timeit.repeat(fn, number=number, repeat=repeat)
    return round(statistics.median(runs) / number * 1e6, 2)


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django

    django.setup()
    from jsonschema import Draft202012Validator

    from bench.tools import STRICT
    from guarded_tools import registry
    from guarded_tools.core.errors import ToolError, ValidationError
    from guarded_tools.core.repair import Repair, RepairPlan, render_message
    from guarded_tools.core.schema.validation import validate

    definition = registry.get("bench_insert_full")  # the STRICT schema, compiled once
    good = {"operationId": "op-12345678", "value": 42}
    bad = {"operationId": "x", "value": -1, "extra": True}

    def valid() -> None:
        validate(definition.validator, good, known=definition.schema_names)

    def invalid() -> None:
        try:
            validate(definition.validator, bad, known=definition.schema_names)
        except ValidationError:
            return
        raise AssertionError("expected a validation error")

    plain = Draft202012Validator(STRICT)

    def jsonschema_is_valid() -> None:  # the library alone, for reference
        plain.is_valid(good)

    plan = RepairPlan(
        steps=(
            Repair(action="refresh_state", instruction="Reload the customer's open orders."),
            Repair(action="call_tool", tool="list_payment_accounts",
                   instruction="Pick the account the customer named."),
            Repair(action="call_tool", tool="prepare_payment_authorization",
                   instruction="Authorize the amount on that account.", fields=("amount",)),
            Repair(action="ask_user", instruction="Confirm the amount and the receiver."),
            Repair(action="retry_same_operation", tool="send_payment",
                   instruction="Send the new authorizationId."),
        ),
        preserve=("operationId", "amount", "receiverId"),
        update=("authorizationId",),
    )
    message = "The payment authorization expired before the payment was sent."

    def render() -> None:
        render_message("authorization_stale", message, "after_repair", plan)

    def error_body() -> None:
        ToolError("authorization_stale", message, repair=plan).as_dict()

    print(json.dumps({
        "validation_valid_us": per_call_us(valid, 5_000),
        "validation_invalid_us": per_call_us(invalid, 1_000),
        "jsonschema_is_valid_us": per_call_us(jsonschema_is_valid, 5_000),
        "repair_plan_render_us": per_call_us(render, 1_000),
        "repair_plan_error_body_us": per_call_us(error_body, 500),
        "repair_plan_message_chars": len(render_message("authorization_stale", message,
                                                        "after_repair", plan)),
    }))


if __name__ == "__main__":
    main()
