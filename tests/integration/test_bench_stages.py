"""``make profile``'s stage table (``bench/profile.py`` on ``bench/stages.py``'s timers).

The table names each stage by the function it times. After issue 26 moved the pipeline
and the store into packages, the old table matched functions by file name and silently
lost every row whose file had moved (validation, authorization, the key's lock, the
operation's INSERT, verification, the output budget): each stage now resolves to a
function or fails here, and a real call fills the rows of the way it ran.
"""

from __future__ import annotations

import sys
import time
import uuid
from typing import Any

import pytest

from bench import stages
from bench.profile import stage_table
from guarded_tools.store.backends.base import OperationStore
from guarded_tools.store.backends.postgresql import PostgreSQLOperationStore
from guarded_tools.store.backends.sql import SQLOperationStore
from guarded_tools.store.backends.sqlite import SQLiteOperationStore
from tests.conftest import one_transaction


@pytest.mark.parametrize("store_class", [OperationStore, SQLiteOperationStore,
                                         PostgreSQLOperationStore])
def test_every_stage_resolves_and_a_store_method_is_timed_where_it_is_defined(
    store_class: type,
) -> None:
    resolved = {label: (owner, name) for label, owner, name in stages.resolve(store_class)}
    assert list(resolved) == [label for label, *_ in stages.STAGES]
    lock_owner, _ = resolved["key lock and read (store)"]
    insert_owner, _ = resolved["operation's INSERT, journal, history (store)"]
    pending_owner, _ = resolved["pending operation (store)"]
    if store_class is not OperationStore:
        # the backend's own lock_key, the SQL store's INSERT: a wrapper on OperationStore's
        # would never run for them
        assert lock_owner is store_class and insert_owner is SQLOperationStore
    else:
        assert lock_owner is insert_owner is OperationStore
    assert pending_owner is OperationStore
    assert set(stages.OUTERMOST) <= set(resolved)


def test_a_stage_that_moved_fails_loudly_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stages, "STAGES", [
        *stages.STAGES,
        ("validation, before the move", "guarded_tools.pipeline", "Pipeline", "validate_input"),
    ])
    with pytest.raises(LookupError, match=r"validation, before the move.*validate_input"):
        stages.resolve(OperationStore)


#: What every fresh call runs, atomic or not (these tools have no ``verify``: a stage with
#: no work for a tool is not walked, so the verification row stays empty).
EVERY_FRESH_CALL = {"the tool's view, whole", "request body parsing", "pipeline, whole",
                    "stages before the claim", "validation", "authorization", "fingerprint",
                    "execution (handler)", "output budget",
                    "remembered for replays", "response (finalize, render)"}


def wrappers_left() -> list[str]:
    """The app's module attributes that are still one of the timers' wrappers."""
    return [f"{key}.{attribute}" for key, module in list(sys.modules.items())
            if key.startswith("guarded_tools") and module is not None
            for attribute, value in list(vars(module).items())
            if getattr(value, "bench_stage", None) is not None]


def timed_call(client: Any, name: str) -> tuple[dict[str, float], float]:
    """One fresh call of tool ``name`` with every stage timed: the stages' CPU, the call's.
    Afterwards no wrapper is left anywhere (a module that imported one by name included)."""
    timers = stages.Timers(clock=time.process_time)
    with pytest.MonkeyPatch.context() as patched:
        stages.instrument(timers, stages.store_in_use(), waits=False, patch=patched.setattr)
        started = time.process_time()
        response = client.post(f"/agent/tools/{name}/", {"operationId": uuid.uuid4().hex},
                               format="json")
        total = time.process_time() - started
    assert response.status_code == 200, response.content
    assert wrappers_left() == []
    return dict(timers.wall), total


@pytest.mark.django_db(transaction=True)  # the atomic call's own transaction, as served
def test_a_fresh_atomic_call_fills_the_rows_of_the_way_it_ran(
    settings: Any, make_tool: Any, client_for: Any, alice: Any,
) -> None:
    one_transaction(settings, True)
    definition = make_tool(lambda input, ctx: {"ok": True}, atomic=True,
                           input_schema={"type": "object",
                                         "properties": {"operationId": {"type": "string"}}})
    spent, total = timed_call(client_for(alice), definition.name)
    ran = set(EVERY_FRESH_CALL)
    if stages.store_in_use()().can_lock():  # the key locked in the call's transaction
        ran |= {"atomic call in one transaction: lock, run, insert",
                "key lock and read (store)", "pending operation (store)",
                "operation's INSERT, journal, history (store)",
                "end of a transaction block (commit)"}
    assert ran <= set(spent), sorted(ran - set(spent))
    assert "replay this process answers" not in spent  # a fresh call: no replay ran
    assert spent["pipeline, whole"] <= spent["the tool's view, whole"] <= total
    table = stage_table("fresh call", "/agent/tools/t/", 1, total, spent)
    assert all(label in table for label in ran) and "the rest of the request" in table


@pytest.mark.django_db(transaction=True)  # the claim commits before the handler runs
def test_a_call_whose_claim_commits_first_fills_its_own_rows(
    make_tool: Any, client_for: Any, alice: Any,
) -> None:
    definition = make_tool(lambda input, ctx: {"ok": True},
                           input_schema={"type": "object",
                                         "properties": {"operationId": {"type": "string"}}})
    spent, _ = timed_call(client_for(alice), definition.name)
    ran = EVERY_FRESH_CALL | {"claim, committed first (store)", "fresh call after its claim",
                              "finalization: budget, verify, complete", "completion (store)"}
    assert ran <= set(spent), sorted(ran - set(spent))
    assert "atomic call in one transaction: lock, run, insert" not in spent
