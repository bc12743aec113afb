"""Class-based tools (``class X(GuardedTool)``) behave exactly as their ``@tool`` twins.

Each scenario runs on a pair of twins (one decorated function, one class, the same options
and hooks) over REST and MCP, with forced (token-like) and session authentication, and
compares what the agent gets; a registered definition cannot be changed afterwards.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from guarded_tools import GuardedTool, Tool, registry, tool
from guarded_tools.models import Confirmation
from tests.conftest import key

pytestmark = pytest.mark.django_db

PERM = "demo.change_order"
SCHEMA = {"type": "object", "properties": {
    "operationId": {"type": "string"}, "n": {"type": "integer", "maximum": 100},
    "crash": {"type": "boolean"}}, "required": ["operationId", "n"],
    "additionalProperties": False}


class Hooks:
    """What the twins' hooks saw, and the one effect each call may have."""

    def __init__(self) -> None:
        self.runs = 0
        self.seen: list[str] = []

    def run(self, input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        self.runs += 1
        if input.get("crash"):
            raise RuntimeError("lost the connection after the effect")
        return {"n": input["n"]}

    def authorize(self, *, input: dict[str, Any], **_: Any) -> bool:
        self.seen.append("authorize")
        return bool(input["n"] != 13)

    def recover(self, *, input: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.seen.append("recover")
        return {"recovered": True, "output": {"n": input["n"]}}

    def verify(self, *, output: Any, **_: Any) -> bool:
        self.seen.append("verify")
        return True


def twins(mode: str | None) -> tuple[Tool, Hooks, Tool, Hooks]:
    """A ``@tool`` and a ``GuardedTool`` with the same options, each with its own hooks."""
    options: dict[str, Any] = {"permissions": [PERM], "idempotency_key": "operationId",
                               "confirm": mode, "journal": True}
    fn = Hooks()
    decorated = tool(f"fn_{uuid.uuid4().hex[:8]}", description="Twin.", input_schema=SCHEMA,
                     authorize=fn.authorize, recover=fn.recover, verify=fn.verify,
                     **options)(fn.run)
    hooks = Hooks()

    class Twin(GuardedTool):
        """Twin."""

        name = f"cls_{uuid.uuid4().hex[:8]}"
        input = SCHEMA
        permissions = (PERM,)
        idempotency_key = "operationId"
        confirm = mode
        journal = True

        def run(self, input: dict[str, Any], ctx: Any) -> dict[str, Any]:
            return hooks.run(input, ctx)

        def authorize(self, **kwargs: Any) -> bool:
            return hooks.authorize(**kwargs)

        def recover(self, **kwargs: Any) -> dict[str, Any]:
            return hooks.recover(**kwargs)

        def verify(self, **kwargs: Any) -> bool:
            return hooks.verify(**kwargs)

    return decorated, fn, Twin.definition, hooks


@pytest.fixture
def pair() -> Iterator[Callable[..., tuple[Tool, Hooks, Tool, Hooks]]]:
    made: list[Tool] = []

    def make(confirm: str | None = None) -> tuple[Tool, Hooks, Tool, Hooks]:
        result = twins(confirm)
        made.extend((result[0], result[2]))
        return result

    yield make
    for definition in made:
        if definition.name in registry:
            registry.unregister(definition.name)


def rest(client: Any, name: str, body: dict[str, Any]) -> tuple[int, Any]:
    response = client.post(f"/agent/tools/{name}/", body, format="json")
    data = response.json()
    return response.status_code, data.get("output", data.get("error", {}).get("code"))


def mcp(client: Any, name: str, body: dict[str, Any]) -> tuple[int, Any]:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": name, "arguments": body}}
    response = client.post("/agent/mcp/", json.dumps(message), content_type="application/json",
                           headers={"MCP-Protocol-Version": "2025-11-25"})
    assert response.status_code == 200, response.content
    result = response.json()["result"]
    content = result["structuredContent"]
    return (1 if result["isError"] else 0), content.get("code") if result["isError"] else content


CALLS = {"rest": rest, "mcp": mcp}


def scenario(call: Callable[..., tuple[int, Any]], client: Any, name: str) -> list[Any]:
    """Validation, authorization, a call and its replay, a crash recovered."""
    body = {"operationId": key(), "n": 1}
    return [
        call(client, name, {"operationId": key(), "n": 1000}),  # the schema refuses it
        call(client, name, {"operationId": key(), "n": 13}),  # authorize refuses it
        call(client, name, body),
        call(client, name, body),  # replayed: no second effect
        call(client, name, {"operationId": key(), "n": 2, "crash": True}),  # recovered
    ]


@pytest.mark.parametrize("transport", ["rest", "mcp"])
@pytest.mark.parametrize("auth", ["token", "session"])
def test_a_class_based_tool_answers_as_its_decorated_twin(
    transport: str, auth: str, pair: Any, user_factory: Any, client_for: Any,
    session_client_for: Any,
) -> None:
    decorated, fn, defined, hooks = pair()
    user = user_factory(perms=(PERM,))
    client = (client_for if auth == "token" else session_client_for)(user)
    call = CALLS[transport]

    got = scenario(call, client, defined.name)
    assert got == scenario(call, client, decorated.name)
    if transport == "rest":
        assert [status for status, _ in got] == [422, 403, 200, 200, 200]
        assert got[0][1] == "invalid_input" and got[1][1] == "authorization_denied"
    else:
        assert [status for status, _ in got] == [1, 1, 0, 0, 0]
    assert hooks.runs == fn.runs == 2  # one call, one crash: the replay ran nothing
    assert hooks.seen == fn.seen and {"authorize", "recover", "verify"} <= set(hooks.seen)
    refused = user_factory()  # no permission: refused before any hook
    assert call(client_for(refused), defined.name, {"operationId": key(), "n": 1}) == call(
        client_for(refused), decorated.name, {"operationId": key(), "n": 1})


def test_the_definitions_are_the_same_but_for_the_name(pair: Any) -> None:
    decorated, _, defined, _ = pair()
    assert isinstance(defined, Tool)
    def unnamed(definition: Tool) -> dict[str, Any]:
        data = definition.describe()
        return {**data, "name": "", "title": "", "annotations": {
            **data["annotations"], "title": ""}}

    assert unnamed(decorated) == unnamed(defined)
    assert defined.permissions == decorated.permissions == (PERM,)
    assert defined.module == __name__


def test_a_class_based_tools_call_is_approved_in_the_admin(
    pair: Any, user_factory: Any, client_for: Any, session_client_for: Any
) -> None:
    _, _, defined, hooks = pair("effect-only")
    user = user_factory(perms=(PERM,))
    body = {"operationId": key(), "n": 5}
    asked = client_for(user).post(f"/agent/tools/{defined.name}/", body, format="json")
    assert asked.status_code == 202 and asked.json()["error"]["code"] == "confirmation_required"
    assert hooks.runs == 0
    approver = user_factory("approver-cls", is_staff=True, is_superuser=True)
    confirmation = Confirmation.objects.get(tool=defined.name)
    admin = session_client_for(approver)
    decided = admin.post(f"/admin/guarded_tools/confirmation/{confirmation.pk}/decide/",
                         {"decision": "approve", "reason": "ok"})
    assert decided.status_code in (200, 302)
    confirmation.refresh_from_db()
    assert confirmation.status != "pending"
    assert rest(client_for(user), defined.name, body) == (200, {"n": 5})
    assert hooks.runs == 1


def test_a_registered_definition_cannot_be_changed(pair: Any) -> None:
    decorated, _, defined, _ = pair("effect-only")
    for definition in (decorated, defined):
        with pytest.raises(dataclasses.FrozenInstanceError):
            definition.permissions = ()  # type: ignore[misc]
        with pytest.raises(dataclasses.FrozenInstanceError):
            definition.validator = None  # type: ignore[misc]
        with pytest.raises(TypeError):
            definition.confirm["mode"] = "always"  # type: ignore[index]
    with pytest.raises(TypeError, match="tuple"):
        Tool(name="t_list", handler=lambda input, ctx: {}, permissions=["x"])  # type: ignore[arg-type]


def test_no_definition_is_patched_after_it_is_built() -> None:
    found = subprocess.run(["grep", "-rn", "object.__setattr__", "guarded_tools/tools",
                            "guarded_tools/core/definition.py", "guarded_tools/core/call.py"],
                           capture_output=True, text=True, check=False)
    assert found.stdout == ""
