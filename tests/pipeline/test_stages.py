"""A site's own stages: added or replaced in ``STAGES``, or listed by a tool, over REST and MCP.

Each stage is a class with hooks (``guarded_tools.pipeline.stages.base``); the pipeline
walks them in the list's order. Both transports, with a token and in a session.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from guarded_tools import Tool, registry
from guarded_tools.conf import DEFAULTS
from guarded_tools.core.errors import AuthorizationError
from guarded_tools.models import Operation
from guarded_tools.pipeline.stages import Call, Stage
from guarded_tools.pipeline.stages.confirmation import ConfirmationStage
from guarded_tools.pipeline.stages.execution import ExecutionStage
from guarded_tools.pipeline.stages.idempotency import IdempotencyStage
from guarded_tools.pipeline.stages.policy import PolicyStage
from guarded_tools.pipeline.stages.verification import VerificationStage
from tests.conftest import OBJECT, Effects, SessionClient, key

pytestmark = pytest.mark.django_db

DEFAULT = list(DEFAULTS["STAGES"])
#: (stage, hook, tool) as the recording stage saw them.
SEEN: list[tuple[str, str, str]] = []
EVENTS: list[str] = []


class ClosedForTheNight(Stage):
    """Refuses every call before anything is claimed or asked of a person."""

    name = "closed"

    def before_claim(self, call: Call) -> None:
        raise AuthorizationError("The service is closed for the night.")


class Recording(Stage):
    """Records what it sees of the call, and an event of its own for the observers."""

    name = "recording"

    def before_claim(self, call: Call) -> None:
        SEEN.append((self.name, "before_claim", call.tool.name))
        call.events.emit("recorded")

    def after_claim(self, call: Call, claim: Any) -> None:
        SEEN.append((self.name, "after_claim", call.tool.name))

    def after_execute(self, call: Call, result: Any) -> None:
        SEEN.append((self.name, "after_execute", call.tool.name))

    def on_replay(self, call: Call, result: Any) -> None:
        SEEN.append((self.name, "on_replay", call.tool.name))


class Wrapped(ExecutionStage):
    """Replaces the execution stage: runs the handler, and says so in the output."""

    def execute(self, call: Call, ctx: Any) -> Any:
        return {"wrapped": super().execute(call, ctx)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class StagedTool(Tool):
    """A tool with its own stage list (``stages``, as the tool definition will carry it)."""

    stages: tuple[Any, ...] | None = None


def observe(event: Any) -> None:
    EVENTS.append(event.stage)


@pytest.fixture(autouse=True)
def _forget() -> Iterator[None]:
    SEEN.clear()
    EVENTS.clear()
    yield
    SEEN.clear()
    EVENTS.clear()


def stages(settings: Any, listed: list[Any]) -> None:
    settings.GUARDED_TOOLS = {**getattr(settings, "GUARDED_TOOLS", {}), "STAGES": listed,
                              "OBSERVERS": ["tests.pipeline.test_stages.observe"]}


def with_stage(stage: str, before: str) -> list[str]:
    at = next(i for i, path in enumerate(DEFAULT) if path.endswith(before))
    return [*DEFAULT[:at], stage, *DEFAULT[at:]]


@pytest.fixture(params=["token", "session"])
def client(request: pytest.FixtureRequest, user_factory: Any,
           session_client_for: Callable[[Any], SessionClient]) -> APIClient:
    user = user_factory()
    if request.param == "session":
        return session_client_for(user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


def call(client: APIClient, transport: str, name: str, body: dict[str, Any]) -> tuple[Any, ...]:
    """(ok, output or error code, replayed) of one call over ``transport``."""
    if transport == "rest":
        response = client.post(f"/agent/tools/{name}/", body, format="json")
        data = response.json()
        if response.status_code != 200:
            return False, data["error"]["code"], False
        return True, data["output"], (data.get("operation") or {}).get("replayed", False)
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": name, "arguments": body}}
    response = client.post("/agent/mcp/", json.dumps(message), content_type="application/json",
                           headers={"MCP-Protocol-Version": "2025-11-25"})
    assert response.status_code == 200, response.content
    result = response.json()["result"]
    if result["isError"]:
        return False, result["structuredContent"]["code"], False
    meta = result.get("_meta") or {}
    replayed = any(isinstance(v, dict) and v.get("replayed") for v in meta.values())
    return True, result["structuredContent"], replayed


TRANSPORTS = ["rest", "mcp"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_stage_added_in_settings_refuses_calls_before_anything_runs(
    transport: str, client: APIClient, make_tool: Any, settings: Any
) -> None:
    effects = Effects()
    definition = make_tool(effects)
    stages(settings,
           with_stage("tests.pipeline.test_stages.ClosedForTheNight", "AuthorizationStage"))
    assert call(client, transport, definition.name, {"operationId": key()}) == (
        False, "authorization_denied", False)
    assert effects.count == 0
    assert not Operation.objects.filter(tool=definition.name).exists()
    assert "failed" in EVENTS


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_stage_added_in_settings_sees_each_hook_and_emits_its_event(
    transport: str, client: APIClient, make_tool: Any, settings: Any
) -> None:
    effects = Effects()
    definition = make_tool(effects)
    stages(settings, with_stage("tests.pipeline.test_stages.Recording", "ExecutionStage"))
    body = {"operationId": key()}
    assert call(client, transport, definition.name, body)[:2] == (True, {"done": 1})
    assert [hook for _, hook, _ in SEEN] == ["before_claim", "after_claim", "after_execute"]
    assert EVENTS.index("started") < EVENTS.index("recorded") < EVENTS.index("executed")
    SEEN.clear()
    assert call(client, transport, definition.name, dict(body)) == (True, {"done": 1}, True)
    assert [hook for _, hook, _ in SEEN] == ["before_claim", "on_replay"]  # never after_claim
    assert effects.count == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_stage_replaced_in_settings_runs_in_its_place(
    transport: str, client: APIClient, make_tool: Any, settings: Any
) -> None:
    effects = Effects()
    definition = make_tool(effects)
    listed = [("tests.pipeline.test_stages.Wrapped" if p.endswith("ExecutionStage") else p)
              for p in DEFAULT]
    stages(settings, listed)
    body = {"operationId": key()}
    assert call(client, transport, definition.name, body)[:2] == (True, {"wrapped": {"done": 1}})
    assert call(client, transport, definition.name, dict(body)) == (
        True, {"wrapped": {"done": 1}}, True)  # the stored result, as executed
    assert effects.count == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_tool_lists_its_own_stages(transport: str, client: APIClient) -> None:
    effects = Effects()
    listed = (*DEFAULT[:-3], Recording, *DEFAULT[-3:])
    staged = registry.register(StagedTool(
        name=f"t_{uuid.uuid4().hex[:10]}", handler=effects, input_schema=OBJECT,
        idempotency_key="operationId", stages=listed))
    closed = registry.register(StagedTool(
        name=f"t_{uuid.uuid4().hex[:10]}", handler=effects, input_schema=OBJECT,
        idempotency_key="operationId", stages=(ClosedForTheNight, *DEFAULT)))
    try:
        assert call(client, transport, staged.name, {"operationId": key()})[:2] == (
            True, {"done": 1})
        assert {tool for _, _, tool in SEEN} == {staged.name}
        assert call(client, transport, closed.name, {"operationId": key()}) == (
            False, "authorization_denied", False)
        assert effects.count == 1  # only the first tool's call ran
    finally:
        registry.unregister(staged.name)
        registry.unregister(closed.name)


class CountedVerification(VerificationStage):
    """A site's verification stage: its own ``after_execute``, for tools without ``verify``."""

    def after_execute(self, call: Call, result: Any) -> None:
        SEEN.append(("verification", "after_execute", call.tool.name))
        super().after_execute(call, result)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_site_override_of_a_built_in_hook_runs_where_the_built_in_has_no_work(
    transport: str, client: APIClient, make_tool: Any, settings: Any
) -> None:
    effects = Effects()
    definition = make_tool(effects)
    assert definition.verify is None  # the built-in stage would have nothing to judge
    listed = [("tests.pipeline.test_stages.CountedVerification"
               if p.endswith("VerificationStage") else p) for p in DEFAULT]
    stages(settings, listed)
    assert call(client, transport, definition.name, {"operationId": key()})[:2] == (
        True, {"done": 1})
    assert SEEN == [("verification", "after_execute", definition.name)]


def test_a_stage_with_no_work_for_a_tool_is_not_walked_for_its_calls(make_tool: Any) -> None:
    from guarded_tools.pipeline import get_pipeline
    from guarded_tools.pipeline.stages.confirmation import ConfirmationStage
    from guarded_tools.pipeline.stages.idempotency import IdempotencyStage
    from guarded_tools.pipeline.stages.policy import PolicyStage

    definition = make_tool(Effects())
    pipeline = get_pipeline(definition)
    walked = {type(pipeline.stages[i]) for i in pipeline.hooks["before_claim"]}
    assert IdempotencyStage in walked  # the tool takes a key
    assert not walked & {PolicyStage, ConfirmationStage}  # no policy, no confirmation
    assert VerificationStage not in {type(pipeline.stages[i])
                                     for i in pipeline.hooks["after_execute"]}


def test_budgets_and_late_confirmation_are_walked_only_for_tools_that_have_them(
    make_tool: Any,
) -> None:
    """The budget stage's hooks for a tool whose policy has budgets; the allowance stage's
    for a tool with a policy; the confirmation's after-claim hook for a tool with
    preconditions or a confirmation asked after the claim."""
    from guarded_tools.core.policy import Budget, Policy, Rule, Run
    from guarded_tools.pipeline import get_pipeline
    from guarded_tools.pipeline.stages.allowance import AllowanceStage
    from guarded_tools.pipeline.stages.budget import BudgetStage

    def walked(definition: Tool, hook: str) -> set[type]:
        pipeline = get_pipeline(definition)
        return {type(pipeline.stages[i]) for i in pipeline.hooks[hook]}

    plain = make_tool(Effects())
    for hook in ("before_claim", "after_claim", "on_release"):
        assert BudgetStage not in walked(plain, hook)
    for hook in ("after_claim", "on_release"):  # allowances stand in for a policy's rules
        assert AllowanceStage not in walked(plain, hook)
        assert AllowanceStage in walked(make_tool(Effects(), confirm=Policy(
            rules=[Rule(outcome=Run(), description="Runs")])), hook)
    assert ConfirmationStage not in walked(plain, "after_claim")
    budgeted = make_tool(Effects(), confirm=Policy(
        rules=[Rule(outcome=Run(), description="Runs")],
        budgets=[Budget(name="calls", count=3)]))
    for hook in ("before_claim", "after_claim", "on_release"):
        assert BudgetStage in walked(budgeted, hook)
    assert ConfirmationStage in walked(make_tool(Effects(), precheck=lambda **kw: None),
                                       "after_claim")
    assert ConfirmationStage in walked(make_tool(Effects(), confirm="effect-only"),
                                       "after_claim")


class SeenConfirmation(ConfirmationStage):
    def before_claim(self, call: Call) -> None:
        SEEN.append(("confirmation", "before_claim", call.tool.name))
        super().before_claim(call)


class SeenIdempotency(IdempotencyStage):
    def before_claim(self, call: Call) -> None:
        SEEN.append(("idempotency", "before_claim", call.tool.name))
        super().before_claim(call)


class SeenPolicy(PolicyStage):
    def before_claim(self, call: Call) -> None:
        SEEN.append(("policy", "before_claim", call.tool.name))
        super().before_claim(call)


class SeenVerifier(VerificationStage):
    """Overrides neither hook, only the ``verify`` both of them call."""

    def verify(self, call: Call, result: Any) -> None:
        SEEN.append(("verification", "verify", call.tool.name))
        super().verify(call, result)


class DecidesItself(ConfirmationStage):
    """Overrides a hook and ``has_work`` both: its own ``has_work`` decides."""

    @classmethod
    def has_work(cls, tool: Any, hook: str) -> bool:
        return hook != "before_claim"

    def before_claim(self, call: Call) -> None:
        SEEN.append(("confirmation", "before_claim", call.tool.name))


@pytest.mark.parametrize(("built_in", "site", "seen"), [
    ("ConfirmationStage", "SeenConfirmation", ("confirmation", "before_claim")),
    ("IdempotencyStage", "SeenIdempotency", ("idempotency", "before_claim")),
    ("PolicyStage", "SeenPolicy", ("policy", "before_claim")),
    ("VerificationStage", "SeenVerifier", ("verification", "verify")),
], ids=["confirmation", "idempotency", "policy", "verification"])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_site_override_of_each_built_in_stage_is_walked_where_the_built_in_has_no_work(
    transport: str, built_in: str, site: str, seen: tuple[str, str], client: APIClient,
    make_tool: Any, settings: Any
) -> None:
    """A read-only tool: no key, no confirmation, no policy, no ``verify``, so none of the
    four built-in stages has work for it; a site's subclass that overrides one of their
    hooks (or the ``verify`` their hooks call) is walked all the same."""
    effects = Effects()
    definition = make_tool(effects, read_only=True, idempotency_key=None)
    listed = [(f"tests.pipeline.test_stages.{site}" if p.endswith(f".{built_in}") else p)
              for p in DEFAULT]
    assert listed != DEFAULT
    stages(settings, listed)
    assert call(client, transport, definition.name, {})[:2] == (True, {"done": 1})
    assert SEEN == [(*seen, definition.name)]


def test_a_site_stage_that_overrides_has_work_decides_for_its_own_hooks(
    make_tool: Any, settings: Any
) -> None:
    from guarded_tools.pipeline import get_pipeline

    definition = make_tool(Effects(), read_only=True, idempotency_key=None)
    stages(settings, [("tests.pipeline.test_stages.DecidesItself"
                       if p.endswith(".ConfirmationStage") else p) for p in DEFAULT])
    pipeline = get_pipeline(definition)
    assert DecidesItself not in {type(pipeline.stages[i])
                                 for i in pipeline.hooks["before_claim"]}
    assert DecidesItself in {type(pipeline.stages[i]) for i in pipeline.hooks["after_claim"]}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_tool_registered_again_under_its_name_is_walked_by_its_own_definition(
    transport: str, client: APIClient
) -> None:
    """The stages walked for a tool are its definition's: a new definition registered
    under the same name (here, with a ``verify`` that says no) is not walked by the old
    one's plan."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    effects = Effects()
    first = registry.register(Tool(name=name, handler=effects, input_schema=OBJECT,
                                   idempotency_key="operationId"))
    try:
        assert call(client, transport, name, {"operationId": key()})[:2] == (True, {"done": 1})
    finally:
        registry.unregister(first.name)
    registry.register(Tool(name=name, handler=effects, input_schema=OBJECT,
                           idempotency_key="operationId", verify=lambda **kw: False))
    try:
        assert call(client, transport, name, {"operationId": key()}) == (
            False, "verification_failed", False)
    finally:
        registry.unregister(name)


def test_a_plan_goes_with_its_tool_definition(make_tool: Any) -> None:
    """What the pipeline decided once per tool is kept no longer than the definition: tools
    made and dropped (as tests and ``guard()`` make them) leave nothing behind."""
    import gc
    import weakref

    from guarded_tools.pipeline import get_pipeline

    definition = make_tool(Effects())
    assert get_pipeline(definition).hooks["before_claim"]
    gone = weakref.ref(definition)
    registry.unregister(definition.name)
    del definition
    gc.collect()
    assert gone() is None  # nothing of the pipeline's holds it
