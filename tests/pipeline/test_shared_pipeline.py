"""A pipeline that keeps nothing of a call serves every call of its tool: built once per
tool, shared by every call and thread, built again when a setting it is built from
changes. A pipeline class, stage or store that does not declare ``stateless`` in its own
body gets a pipeline built for each call, as before.

Calls go through the public surface: REST with a token and with a session, MCP with a
token, a tool called in code from many threads at once, and on PostgreSQL keyed calls
from threads on their own connections.
"""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connections
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from guarded_tools.models import Operation, OperationState
from guarded_tools.pipeline import Pipeline, get_pipeline
from guarded_tools.pipeline.stages import DEFAULT_STAGES, Stage
from guarded_tools.pipeline.stages.validation import ValidationStage
from guarded_tools.store.backends.base import OperationStore

#: Each built pipeline's tool name, in order.
BUILT: list[str] = []
#: The instances of the site's stage that saw a call, in order.
SEEN: list[Any] = []


class Built(Pipeline):
    """Says each time one is built; keeps nothing of a call, and says so."""

    stateless = True

    def __init__(self, definition: Any) -> None:
        BUILT.append(definition.name)
        super().__init__(definition)


class Undeclared(Built):
    """The same, without saying again that it keeps nothing of a call."""


class Seen(ValidationStage):
    """A site's stage that notes which instance saw each call: a subclass of a built-in
    stage that declares ``stateless``, not saying so again itself."""

    name = "seen"

    def before_claim(self, call: Any) -> None:
        SEEN.append(self)
        super().before_claim(call)


class SeenStateless(Seen):
    stateless = True


class PlainStore(OperationStore):
    """A site's store that does not declare ``stateless``."""


def stages_with(stage: type[Stage]) -> list[Any]:
    return [*DEFAULT_STAGES[:1], f"{__name__}.{stage.__name__}", *DEFAULT_STAGES[1:]]


@pytest.fixture(autouse=True)
def _clean() -> None:
    BUILT.clear()
    SEEN.clear()


def token_client(user: Any) -> APIClient:
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def call_rest(client: Any, name: str) -> Any:
    response = client.post(f"/agent/tools/{name}/", {"operationId": uuid.uuid4().hex},
                           format="json")
    assert response.status_code == 200, response.content
    return response.json()


def call_mcp(client: Any, name: str) -> Any:
    response = client.post("/agent/mcp/", {
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": name, "arguments": {"operationId": uuid.uuid4().hex}},
    }, format="json", HTTP_ACCEPT="application/json, text/event-stream",
        HTTP_MCP_PROTOCOL_VERSION="2025-11-25")
    assert response.status_code == 200, response.content
    result = response.json()["result"]
    assert result["isError"] is False, result
    return result


@pytest.mark.django_db
@pytest.mark.parametrize("auth", ["token", "session"])
def test_one_pipeline_serves_every_call_of_a_tool_over_rest_and_mcp(
    auth: str, make_tool: Any, alice: Any, session_client_for: Callable[[Any], Any],
    settings: Any,
) -> None:
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS,
                              "PIPELINE_CLASS": f"{__name__}.Built",
                              "STAGES": stages_with(SeenStateless)}
    definition = make_tool()
    client = token_client(alice) if auth == "token" else session_client_for(alice)
    for _ in range(3):
        call_rest(client, definition.name)
    call_mcp(client, definition.name)
    assert BUILT.count(definition.name) == 1, BUILT
    assert len(SEEN) == 4 and len(set(map(id, SEEN))) == 1, SEEN
    assert Operation.objects.filter(tool=definition.name,
                                    state=OperationState.SUCCEEDED).count() == 4


@pytest.mark.django_db
@pytest.mark.parametrize("undeclared", ["pipeline", "stage", "store"])
def test_a_part_that_does_not_declare_stateless_gets_a_pipeline_per_call(
    undeclared: str, make_tool: Any, alice: Any, settings: Any,
) -> None:
    settings.GUARDED_TOOLS = {
        **settings.GUARDED_TOOLS,
        "PIPELINE_CLASS": f"{__name__}.{'Undeclared' if undeclared == 'pipeline' else 'Built'}",
        "STAGES": stages_with(Seen if undeclared == "stage" else SeenStateless),
        **({"STORE_CLASS": f"{__name__}.PlainStore"} if undeclared == "store" else {}),
        "ATOMIC_SINGLE_TRANSACTION": False,
    }
    definition = make_tool()
    client = token_client(alice)
    for _ in range(3):
        call_rest(client, definition.name)
    assert BUILT.count(definition.name) == 3, BUILT
    assert len(SEEN) == 3 and len(set(map(id, SEEN))) == 3, "an instance per call"


@pytest.mark.django_db
def test_a_setting_the_pipeline_is_built_from_builds_it_again(
    make_tool: Any, alice: Any, settings: Any,
) -> None:
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "PIPELINE_CLASS": f"{__name__}.Built"}
    definition = make_tool()
    client = token_client(alice)
    call_rest(client, definition.name)
    call_rest(client, definition.name)
    assert BUILT.count(definition.name) == 1
    # A stage added to the list: the next call walks it.
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "STAGES": stages_with(SeenStateless)}
    call_rest(client, definition.name)
    assert BUILT.count(definition.name) == 2
    assert len(SEEN) == 1


#: Where ``Routing`` sends the next write of an operation.
ROUTE = ["default"]


class Routing:
    """A database router whose answer changes from request to request (a tenant's)."""

    def db_for_write(self, model: Any, **hints: Any) -> str:
        return ROUTE[0]


class BuiltWithItsStore(Built):
    """``Built``, with a store of its own class (the vendor's store would open the
    database's connection)."""

    stateless = True
    store_class = OperationStore


def test_a_pipeline_is_kept_per_database_a_router_chooses(make_tool: Any,
                                                          settings: Any) -> None:
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS,
                              "PIPELINE_CLASS": f"{__name__}.BuiltWithItsStore"}
    settings.DATABASE_ROUTERS = [f"{__name__}.Routing"]
    definition = make_tool()
    ROUTE[0] = "default"
    first = get_pipeline(definition)
    ROUTE[0] = "tenant_b"
    other = get_pipeline(definition)
    assert other is not first and get_pipeline(definition) is other
    ROUTE[0] = "default"
    assert get_pipeline(definition) is first
    assert BUILT.count(definition.name) == 2


@pytest.mark.django_db
def test_a_replaced_definition_gets_its_own_pipeline(
    make_tool: Any, alice: Any, settings: Any,
) -> None:
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "PIPELINE_CLASS": f"{__name__}.Built"}
    first = make_tool(lambda input, ctx: {"version": 1})
    client = token_client(alice)
    assert call_rest(client, first.name)["output"] == {"version": 1}
    from guarded_tools.core.registry import registry

    registry.unregister(first.name)
    make_tool(lambda input, ctx: {"version": 2}, name=first.name)
    assert call_rest(client, first.name)["output"] == {"version": 2}
    assert BUILT.count(first.name) == 2


def test_a_copied_definition_gets_a_pipeline_of_its_own(make_tool: Any, settings: Any) -> None:
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "PIPELINE_CLASS": f"{__name__}.Built"}
    definition = make_tool(idempotency_key=None, read_only=True, allow_anonymous=True)
    first = get_pipeline(definition)
    assert get_pipeline(definition) is first and first.tool is definition
    copied = copy.copy(definition)
    assert get_pipeline(copied).tool is copied
    assert BUILT.count(definition.name) == 2


def test_one_shared_pipeline_serves_calls_in_many_threads_at_once(make_tool: Any,
                                                                   settings: Any) -> None:
    """Eight calls inside one pipeline at the same time (each waits in its handler until
    all eight are there): each gets its own input's answer."""
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "PIPELINE_CLASS": f"{__name__}.Built"}
    together = threading.Barrier(8, timeout=30)

    def handler(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        together.wait()
        return {"value": input["value"], "thread": threading.get_ident()}

    definition = make_tool(handler, idempotency_key=None, read_only=True,
                           allow_anonymous=True,
                           input_schema={"type": "object",
                                         "properties": {"value": {"type": "integer"}}})

    def one(value: int) -> tuple[int, dict[str, Any]]:
        return value, definition({"value": value}).output

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(one, range(8)))
    assert [output["value"] for _, output in answers] == list(range(8))
    assert len({output["thread"] for _, output in answers}) == 8
    assert BUILT.count(definition.name) == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_keyed_calls_on_their_own_connections_share_one_pipeline(
    make_tool: Any, alice: Any, settings: Any,
) -> None:
    """Eight keyed calls in eight threads, each on its own PostgreSQL connection, inside
    one pipeline at once: each claims and completes its own key, and nothing else."""
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "PIPELINE_CLASS": f"{__name__}.Built"}
    together = threading.Barrier(8, timeout=30)

    def handler(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        together.wait()
        return {"key": input["operationId"]}

    definition = make_tool(handler)
    keys = [uuid.uuid4().hex for _ in range(8)]

    def one(key: str) -> Any:
        try:
            return definition({"operationId": key}, user=alice)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, keys))
    assert [r.output for r in results] == [{"key": k} for k in keys]
    assert not any(r.replayed for r in results)
    rows = dict(Operation.objects.filter(tool=definition.name).values_list("key", "state"))
    assert rows == dict.fromkeys(keys, OperationState.SUCCEEDED)
    assert BUILT.count(definition.name) == 1
