"""The replay cache: succeeded operations answered from this process, every rule still on."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from guarded_tools import AuthorizationError, VerificationError, guard
from guarded_tools.core.definition import Tool
from guarded_tools.core.errors import IdempotencyKeyReused
from guarded_tools.models import Operation
from guarded_tools.store.replays import ReplayCache, replays
from tests.conftest import OBJECT, key

pytestmark = pytest.mark.django_db


class Handler:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, input: dict[str, Any], ctx: Any) -> Any:
        self.calls += 1
        return {"n": self.calls, "when": "2026-11-29"}


def tool(handler: Any, **options: Any) -> Any:
    return guard(handler, input_schema=OBJECT, idempotency_key="operationId", **options)


@pytest.mark.parametrize("atomic", [False, True])
def test_a_replay_this_process_saw_costs_no_statement(atomic: bool) -> None:
    handler = Handler()
    run = tool(handler, atomic=atomic)
    body = {"operationId": key()}
    first = run(body, principal="svc")
    with CaptureQueriesContext(connection) as queries:
        again = run(body, principal="svc")
    assert queries.captured_queries == []
    assert handler.calls == 1 and again.replayed and not first.replayed
    assert again.output == first.output
    assert again.operation == {**first.operation, "replayed": True}


def test_the_cache_answers_what_the_database_answers() -> None:
    run = tool(Handler())
    body = {"operationId": key()}
    run(body, principal="svc")
    cached = run(body, principal="svc")
    replays.clear()
    stored = run(body, principal="svc")
    assert (cached.output, cached.operation, cached.recovered) == (
        stored.output, stored.operation, stored.recovered)


def test_another_input_with_the_key_is_refused_from_the_cache_too() -> None:
    run = tool(Handler())
    body = {"operationId": key()}
    run(body, principal="svc")
    with CaptureQueriesContext(connection) as queries, pytest.raises(IdempotencyKeyReused):
        run({**body, "other": 1}, principal="svc")
    assert queries.captured_queries == []


def test_keys_never_cross_principals_in_the_cache() -> None:
    handler = Handler()
    run = tool(handler)
    body = {"operationId": key()}
    run(body, principal="a")
    assert not run(body, principal="b").replayed
    assert handler.calls == 2


def test_authorization_and_verify_still_run_on_a_cached_replay() -> None:
    allowed = [True]
    verified = [True]
    run = tool(Handler(), authorize=lambda **kw: allowed[0], verify=lambda **kw: verified[0])
    body = {"operationId": key()}
    run(body, principal="svc")
    allowed[0] = False
    with pytest.raises(AuthorizationError):
        run(body, principal="svc")
    allowed[0], verified[0] = True, False
    with pytest.raises(VerificationError):
        run(body, principal="svc")


def test_the_cache_can_be_turned_off(settings: Any) -> None:
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "REPLAY_CACHE_SIZE": 0}
    run = tool(Handler())
    body = {"operationId": key()}
    run(body, principal="svc")
    with CaptureQueriesContext(connection) as queries:
        assert run(body, principal="svc").replayed
    assert len(queries.captured_queries) >= 1 and len(replays) == 0


def test_entries_expire_are_bounded_and_large_outputs_are_not_kept(settings: Any,
                                                                   monkeypatch: Any) -> None:
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "REPLAY_CACHE_SIZE": 2,
                              "REPLAY_CACHE_SECONDS": 0.2, "REPLAY_CACHE_MAX_BYTES": 50}
    # The cache's clock, moved by the test: a busy machine's pause must not expire entries.
    now = [1000.0]
    monkeypatch.setattr("guarded_tools.store.replays.time", SimpleNamespace(monotonic=lambda: now[0]))  # noqa: E501
    cache = ReplayCache()
    for k in ("a", "b", "c"):
        assert cache.put("t", "s", k, fingerprint="f", output={"k": k}, operation={"id": k},
                         recovered=False)
    assert len(cache) == 2 and cache.get("t", "s", "a") is None  # least recently used out
    assert cache.get("t", "s", "c") is not None
    assert not cache.put("t", "s", "big", fingerprint="f", output={"x": "y" * 100},
                         operation={}, recovered=False)
    now[0] += 0.19
    assert cache.get("t", "s", "c") is not None
    now[0] += 0.05
    assert cache.get("t", "s", "c") is None


def test_a_cached_output_is_a_fresh_copy_each_time() -> None:
    run = tool(Handler())
    body = {"operationId": key()}
    run(body, principal="svc")
    run(body, principal="svc").output["n"] = "changed by a caller"
    assert run(body, principal="svc").output["n"] == 1


def test_the_purge_empties_this_processs_cache(settings: Any) -> None:
    from guarded_tools.pipeline.recovery import purge_completed

    run = tool(Handler())
    body = {"operationId": key()}
    run(body, principal="svc")
    Operation.objects.update(updated_at="2000-01-01T00:00:00Z")
    assert purge_completed(days=1) == 1
    assert len(replays) == 0
    assert not run(body, principal="svc").replayed  # purged: the key is fresh again


STRICT = {
    "type": "object",
    "properties": {"operationId": {"type": "string"}, "n": {"type": "integer", "minimum": 0}},
    "required": ["operationId", "n"],
    "additionalProperties": False,
}


def test_the_very_input_it_answered_is_not_validated_again(monkeypatch: Any) -> None:
    """It passed the same validator when it was answered; every other input is validated."""
    import guarded_tools.pipeline.stages.validation as pipeline  # the validation stage
    from guarded_tools.core.errors import ValidationError

    # Every input reaches the full validator here: the check compiled per tool that
    # accepts common flat inputs before it is proved in tests/core/test_schema_fast.py.
    monkeypatch.setattr(Tool, "accepts", None)
    validated: list[Any] = []
    real = pipeline.validate
    monkeypatch.setattr(pipeline, "validate", lambda v, value, **kw: (
        validated.append(value), real(v, value, **kw))[1])
    handler = Handler()
    run = guard(handler, input_schema=STRICT, idempotency_key="operationId")
    body = {"operationId": key(), "n": 1}
    run(body, principal="svc")
    assert run(dict(body), principal="svc").replayed
    assert validated == [body]  # the first call only
    with pytest.raises(ValidationError):  # the same key, an invalid input: 422 first
        run({**body, "n": -1}, principal="svc")
    with pytest.raises(IdempotencyKeyReused):  # a valid other input: validated, then refused
        run({**body, "n": 2}, principal="svc")
    assert len(validated) == 3
    assert run(body, principal="other").replayed is False  # another principal: validated
    assert len(validated) == 4 and handler.calls == 2


def test_a_replay_compares_the_kept_canonical_text_and_hashes_only_a_long_input(
        monkeypatch: Any) -> None:
    """The entry keeps the input's canonical text when it is short: a replay with that text
    (keys in any order) is answered with no digest made; another input, or 1 for 1.0, is
    refused; a long input is kept without its text, and its replay is digested."""
    import guarded_tools.pipeline.stages.base as stages
    from guarded_tools.store.replays import CANONICAL_KEPT
    from guarded_tools.store.values import fingerprint

    digests: list[str] = []
    real = stages.digest
    monkeypatch.setattr(stages, "digest", lambda text: (digests.append(text), real(text))[1])
    handler = Handler()
    run = tool(handler)
    body = {"operationId": key(), "amount": 1.0, "to": "acct"}
    run(body, principal="svc")
    assert len(digests) == 1  # the fresh call's fingerprint
    entry = next(e for k, e in replays._entries.items() if k[2] == body["operationId"])
    assert entry.canonical and entry.fingerprint == fingerprint(body)
    reordered = {"to": "acct", "amount": 1.0, "operationId": body["operationId"]}
    assert run(reordered, principal="svc").replayed
    assert len(digests) == 1  # compared, not hashed
    with pytest.raises(IdempotencyKeyReused):
        run({**body, "amount": 1}, principal="svc")  # 1 is not 1.0 in the fingerprint
    with pytest.raises(IdempotencyKeyReused):
        run({**body, "to": "other"}, principal="svc")
    assert len(digests) == 3 and handler.calls == 1

    long = {"operationId": key(), "note": "x" * CANONICAL_KEPT}
    run(long, principal="svc")
    entry = next(e for k, e in replays._entries.items() if k[2] == long["operationId"])
    assert entry.canonical == "" and entry.fingerprint == fingerprint(long)
    before = len(digests)
    assert run(dict(long), principal="svc").replayed
    assert len(digests) == before + 1 and handler.calls == 2
