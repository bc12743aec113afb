"""Tools that child processes (scripts, a Celery worker) register to prove cross-process rules.

Every effect and every ``recover`` call writes a row to a demo table, so the parent test
can count them across processes: ``effect:<key>`` and ``recover:<operation id>`` are
``Slot.resource`` values. The parent test process never registers these tools (they would
appear in other tests' tool lists); children call :func:`register`, or set
``GT_REGISTER_TEST_TOOLS=1`` and import this module (``celery worker -I ...``).
"""

from __future__ import annotations

import os
import time
from typing import Any

from django.utils import timezone

from guarded_tools import Tool, registry, tool

EFFECT_TOOL = "process_effect"
RECOVERABLE_TOOL = "process_recoverable"
ATOMIC_TOOL = "process_atomic"
SCHEMA = {
    "type": "object",
    "properties": {"operationId": {"type": "string"}, "sleep": {"type": "number"},
                   "sleepAfter": {"type": "number"}},
    "required": ["operationId"],
}


def effect_rows(key: str) -> Any:
    from project.demo.models import Slot

    return Slot.objects.filter(resource=f"effect:{key}")


def recover_rows(operation_id: str) -> Any:
    from project.demo.models import Slot

    return Slot.objects.filter(resource=f"recover:{operation_id}")


def _effect(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    from project.demo.models import Slot

    time.sleep(float(input.get("sleep") or 0))
    Slot.objects.create(resource=f"effect:{input['operationId']}", starts_at=timezone.now())
    if input.get("sleepAfter"):  # the effect is written (not committed, if atomic): say so
        print("EFFECT WRITTEN", flush=True)
        time.sleep(float(input["sleepAfter"]))
    return {"pid": os.getpid(), "key": input["operationId"]}


def _recover(*, input: dict[str, Any], operation: Any, **_: Any) -> dict[str, Any]:
    from project.demo.models import Slot

    # GT_RECOVER_SLEEP holds a sweeper inside recover, so a test can kill it there.
    time.sleep(float(os.environ.get("GT_RECOVER_SLEEP") or 0))
    Slot.objects.create(resource=f"recover:{operation.id}", starts_at=timezone.now())
    return {"recovered": True, "output": {"recoveredBy": os.getpid(), "key": operation.key}}


def register() -> dict[str, Tool]:
    """Register the tools in this process (idempotent)."""
    if EFFECT_TOOL not in registry:
        tool(name=EFFECT_TOOL, input_schema=SCHEMA, idempotency_key="operationId")(_effect)
    if ATOMIC_TOOL not in registry:
        tool(name=ATOMIC_TOOL, input_schema=SCHEMA, idempotency_key="operationId",
             atomic=True)(_effect)
    if RECOVERABLE_TOOL not in registry:
        tool(
            name=RECOVERABLE_TOOL,
            input_schema=SCHEMA,
            idempotency_key="operationId",
            recover=_recover,
        )(_effect)
    return {name: registry.get(name) for name in (EFFECT_TOOL, RECOVERABLE_TOOL, ATOMIC_TOOL)}


if os.environ.get("GT_REGISTER_TEST_TOOLS") == "1":
    register()
