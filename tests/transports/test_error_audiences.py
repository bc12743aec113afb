"""Every error the guard owns, worded for where it is read: REST or MCP, keyed tool or not."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import pytest
from django.http import Http404
from rest_framework import exceptions as drf
from rest_framework import serializers
from rest_framework.test import APIClient

from guarded_tools import Tool
from guarded_tools.core import errors as exc
from guarded_tools.core.agent_errors import to_guard_error
from guarded_tools.core.codes import BUILTIN
from guarded_tools.core.errors import GuardError
from tests.conftest import key
from tests.transports.agent_errors import MCP_VERSION, assert_fits, mcp_error, mcp_post

pytestmark = pytest.mark.django_db
def guard_classes() -> list[type[GuardError]]:
    """Every error class the guard raises: GuardError's subclasses, the application's
    ``ToolError`` excepted."""
    found: list[type[GuardError]] = []
    stack = list(GuardError.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls is not exc.ToolError and cls.__module__ == exc.__name__:
            found.append(cls)
    return sorted(found, key=lambda cls: cls.code)


def make_error(cls: type[GuardError]) -> GuardError:
    """An instance as the guard raises it (two classes take a required argument)."""
    if cls is exc.InternalError:
        return exc.InternalError("c0ffee")
    if cls is exc.ValidationError:
        return exc.ValidationError([{"path": ["title"], "keyword": "type", "message": "m"}])
    return cls()


CLASSES = guard_classes()


def test_every_catalog_code_has_one_class_and_every_class_a_catalog_code() -> None:
    codes = [cls.code for cls in CLASSES]
    assert sorted(codes) == sorted(BUILTIN.entries)


@pytest.fixture
def raising_tool(make_tool: Callable[..., Tool]) -> Callable[[bool, Callable[[], Any]], Tool]:
    """A tool whose context hook raises the given error: it reaches the agent as raised."""

    def make(keyed: bool, error: Callable[[], GuardError]) -> Tool:
        def context(input: Any, **kwargs: Any) -> Any:
            raise error()

        if keyed:
            return make_tool(context=context)
        return make_tool(context=context, read_only=True, idempotency_key=None)

    return make


def tool_cases() -> Iterator[Any]:
    for cls in CLASSES:
        for keyed in (True, False):
            if cls.arises == "keyed_call" and not keyed:
                continue  # no keyless call can meet it
            yield pytest.param(cls, keyed, id=f"{cls.code}-{'keyed' if keyed else 'keyless'}")


@pytest.mark.parametrize("transport", ["rest", "mcp"])
@pytest.mark.parametrize(("cls", "keyed"), list(tool_cases()))
def test_every_error_of_a_tool_call_fits_its_transport_and_tool(
    cls: type[GuardError], keyed: bool, transport: str, raising_tool: Any, alice: Any,
    client_for: Any,
) -> None:
    definition = raising_tool(keyed, lambda: make_error(cls))
    client = client_for(alice)
    body = {"operationId": key()} if keyed else {}
    if transport == "rest":
        response = client.post(f"/agent/tools/{definition.name}/", body, format="json")
        assert response.status_code == make_error(cls).status_code
        data = response.json()["error"]
    else:
        data = mcp_error(mcp_post(client, "tools/call",
                                  {"name": definition.name, "arguments": body}))
    # A refusal before any tool runs (not_authenticated over MCP) is about no tool.
    assert_fits(data, cls.code, transport, "keyed" if keyed else "keyless")


REQUEST_CLASSES = [pytest.param(cls, id=cls.code) for cls in CLASSES if cls.arises == "request"]


@pytest.mark.parametrize("cls", REQUEST_CLASSES)
def test_every_error_of_the_tool_list_fits_rest(cls: type[GuardError], alice: Any,
                                                client_for: Any) -> None:
    with mock.patch("guarded_tools.transports.rest.views.visible_tools", side_effect=make_error(cls)):  # noqa: E501
        response = client_for(alice).get("/agent/tools/")
    assert response.status_code == make_error(cls).status_code
    assert_fits(response.json()["error"], cls.code, "rest", "none")


@pytest.mark.parametrize("method", ["ping", "initialize", "tools/list"])
@pytest.mark.parametrize("cls", REQUEST_CLASSES)
def test_every_error_before_an_mcp_method_fits_mcp(cls: type[GuardError], method: str,
                                                   alice: Any, client_for: Any) -> None:
    with mock.patch("guarded_tools.transports.mcp.server._require_caller", side_effect=make_error(cls)):  # noqa: E501
        response = mcp_post(client_for(alice), method, {"protocolVersion": MCP_VERSION})
    assert response.status_code == make_error(cls).status_code
    assert_fits(mcp_error(response), cls.code, "mcp", "none")


# -- the symptoms as the issue found them, with nothing patched ------------------------------


def test_not_authenticated_on_the_tool_list_names_no_tool_and_no_key(make_tool: Any) -> None:
    make_tool()
    response = APIClient().get("/agent/tools/")
    assert response.status_code == 401
    error = response.json()["error"]
    assert_fits(error, "not_authenticated", "rest", "none")


@pytest.mark.parametrize("method", ["initialize", "ping"])
def test_not_authenticated_on_initialize_and_ping_names_no_tool_and_no_key(
    method: str, make_tool: Any
) -> None:
    make_tool()
    response = mcp_post(APIClient(), method, {"protocolVersion": MCP_VERSION})
    assert response.status_code == 401
    assert_fits(mcp_error(response), "not_authenticated", "mcp", "none")


def test_invalid_input_on_a_keyless_tool_says_nothing_of_a_key(
    make_tool: Any, alice: Any, client_for: Any
) -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    definition = make_tool(read_only=True, idempotency_key=None, input_schema=schema)
    response = client_for(alice).post(f"/agent/tools/{definition.name}/", {"q": 7},
                                      format="json")
    assert response.status_code == 422
    assert_fits(response.json()["error"], "invalid_input", "rest", "keyless")


def test_errors_over_mcp_say_tools_list_not_get_tools(
    make_tool: Any, alice: Any, client_for: Any
) -> None:
    schema = {"type": "object", "properties": {"operationId": {"type": "string"},
                                               "n": {"type": "integer"}}}
    definition = make_tool(input_schema=schema)
    client = client_for(alice)
    invalid = mcp_error(mcp_post(client, "tools/call", {
        "name": definition.name, "arguments": {"operationId": key(), "n": "x"}}))
    assert_fits(invalid, "invalid_input", "mcp", "keyed")
    assert "tools/list" in invalid["fix"]
    unknown = mcp_error(mcp_post(client, "tools/call", {"name": "no_such_tool",
                                                        "arguments": {}}))
    assert_fits(unknown, "tool_not_found", "mcp", "none")
    assert "tools/list" in unknown["fix"]


def test_rest_errors_say_get_tools(make_tool: Any, alice: Any, client_for: Any) -> None:
    response = client_for(alice).post("/agent/tools/no_such_tool/", {}, format="json")
    error = response.json()["error"]
    assert_fits(error, "tool_not_found", "rest", "none")
    assert "GET tools/" in error["fix"]


def test_a_malformed_body_is_after_repair_with_a_repair(
    make_tool: Any, alice: Any, client_for: Any
) -> None:
    definition = make_tool()
    response = client_for(alice).post(f"/agent/tools/{definition.name}/", data="{nope",
                                      content_type="application/json")
    assert response.status_code == 400
    assert_fits(response.json()["error"], "malformed_request", "rest", "keyed")


# -- the catalog holds every code the app can answer -----------------------------------------


def drf_exceptions() -> list[Exception]:
    """One instance of every exception DRF defines (the site's policies raise them)."""
    found: list[Exception] = []
    for value in vars(drf).values():
        if isinstance(value, type) and issubclass(value, drf.APIException):
            try:
                found.append(value())
            except TypeError:  # MethodNotAllowed, UnsupportedMediaType: one argument
                found.append(value("GET"))
    return found


def answerable_codes() -> set[str]:
    """The guard's classes, what DRF's and Django's exceptions map to, and the code a
    person's reconciled failure answers by default."""
    from guarded_tools.pipeline.reconciliation import mark_failed

    codes = {cls.code for cls in CLASSES}
    for raised in [*drf_exceptions(), Http404(), RuntimeError("boom")]:
        codes.add(to_guard_error(raised).code)
    codes.add(inspect.signature(mark_failed).parameters["code"].default)
    return codes


def test_every_code_the_app_can_answer_is_in_every_catalog_export() -> None:
    codes = answerable_codes()
    assert {"method_not_allowed", "operation_failed"} <= codes
    client = APIClient()
    listed = {e["code"] for c in client.get("/agent/errors.json").json()["catalogs"]
              for e in c["errors"]}
    llms = client.get("/agent/llms.txt").content.decode()
    page = client.get("/agent/errors/").content.decode()
    for code in sorted(codes):
        assert code in listed, code
        assert f"### {code} (HTTP " in llms, code
        assert f'id="{code}"' in page, code


def test_a_wrong_method_answers_its_catalog_entry(alice: Any, client_for: Any) -> None:
    response = client_for(alice).delete("/agent/tools/")
    assert response.status_code == 405
    error = response.json()["error"]
    assert error["code"] == "method_not_allowed"
    assert error["why"] == BUILTIN["method_not_allowed"].why
    assert error["link"].endswith("#method_not_allowed")
    assert "GET" in response["Allow"]
    assert_fits(error, "method_not_allowed", "rest", "none")


# -- a pending confirmation gives the agent something to poll ---------------------------------

#: The one form of every time the agent surface shows.
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def approver(django_user_model: Any) -> Any:
    return django_user_model.objects.create_superuser("boss", password="pw")


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "keyless"])
def test_a_pending_confirmation_says_where_to_poll_and_when(
    keyed: bool, make_tool: Any, alice: Any, bob: Any, approver: Any, client_for: Any,
    settings: Any,
) -> None:
    from guarded_tools import confirmations
    from guarded_tools.models import Confirmation

    settings.GUARDED_TOOLS = {**getattr(settings, "GUARDED_TOOLS", {}),
                              "CONFIRMATION_RETRY_AFTER_SECONDS": 3}
    options: dict[str, Any] = {} if keyed else {"read_only": True, "idempotency_key": None}
    definition = make_tool(confirm="always", **options)
    client = client_for(alice)
    body = {"operationId": key()} if keyed else {}
    pending = client.post(f"/agent/tools/{definition.name}/", body, format="json")
    assert pending.status_code == 202
    assert pending["Retry-After"] == "3"
    error = pending.json()["error"]
    assert_fits(error, "confirmation_required", "rest", "keyed" if keyed else "keyless")
    assert TIMESTAMP.match(error["confirmation"]["expires_at"])
    # Location: a URL this caller may read, with the confirmation's state.
    location = pending["Location"]
    assert location.startswith("http://testserver/agent/confirmations/")
    state = client.get(location)
    assert state.status_code == 200
    data = state.json()
    assert {k: data[k] for k in ("id", "status", "expires_at")} == error["confirmation"]
    assert data["status"] == "pending" and data["decided_at"] is None
    assert TIMESTAMP.match(data["created_at"])
    # Another principal learns nothing of it.
    other = client_for(bob).get(location)
    assert other.status_code == 404
    assert other.json()["error"]["code"] == "confirmation_not_found"
    assert client_for(None).get(location).status_code == 401
    confirmations.approve(Confirmation.objects.get(pk=data["id"]), approver)
    decided = client.get(location).json()
    assert decided["status"] == "approved" and TIMESTAMP.match(decided["decided_at"])


def test_an_operation_waiting_for_approval_shows_its_confirmation(
    make_tool: Any, alice: Any, client_for: Any
) -> None:
    definition = make_tool(confirm="effect-only")
    client = client_for(alice)
    pending = client.post(f"/agent/tools/{definition.name}/", {"operationId": key()},
                          format="json")
    assert pending.status_code == 202
    asked = pending.json()["error"]["confirmation"]
    state = client.get(pending["Location"]).json()
    assert state["operation"]  # the claim this effect-only call made
    operation = client.get(f"/agent/operations/{state['operation']}/")
    assert operation.status_code == 200
    data = operation.json()
    assert data["confirmation"] == asked
    assert data["confirmation"]["status"] == "pending"
    assert TIMESTAMP.match(data["created_at"])


def test_every_time_the_agent_reads_has_one_form(
    make_tool: Any, alice: Any, client_for: Any
) -> None:
    definition = make_tool()
    client = client_for(alice)
    done = client.post(f"/agent/tools/{definition.name}/", {"operationId": key()},
                       format="json").json()
    data = client.get(f"/agent/operations/{done['operation']['id']}/").json()
    assert TIMESTAMP.match(data["created_at"]) and TIMESTAMP.match(data["completed_at"])


# -- the guard's own 5xx states log once, at their level -------------------------------------


def request_errors(caplog: Any) -> list[Any]:
    return [r for r in caplog.records if r.name == "django.request"]


def test_outcome_unknown_logs_one_warning_per_answer_not_an_internal_server_error(
    make_tool: Any, alice: Any, client_for: Any, caplog: Any
) -> None:
    def handler(input: Any, ctx: Any) -> Any:
        ctx.operation.write({"charged": True})  # past the effect boundary
        raise ConnectionError("payments.internal:443 reset")

    definition = make_tool(handler)
    client = client_for(alice)
    body = {"operationId": key()}
    caplog.set_level("INFO")
    for attempt in range(2):  # the call, then its replay
        caplog.clear()
        response = client.post(f"/agent/tools/{definition.name}/", body, format="json")
        assert response.status_code == 500
        error = response.json()["error"]
        assert error["code"] == "outcome_unknown"
        operation_id = error["operation"]["id"]
        assert request_errors(caplog) == [], attempt
        ours = [r for r in caplog.records if "outcome_unknown" in r.getMessage()]
        assert len(ours) == 1 and ours[0].levelname == "WARNING"
        assert operation_id in ours[0].getMessage()


def test_verification_failed_logs_one_warning_with_the_operation(
    make_tool: Any, alice: Any, client_for: Any, caplog: Any
) -> None:
    definition = make_tool(verify=lambda **kwargs: False)
    caplog.set_level("INFO")
    response = client_for(alice).post(f"/agent/tools/{definition.name}/",
                                      {"operationId": key()}, format="json")
    assert response.status_code == 502
    operation_id = response.json()["error"]["operation"]["id"]
    assert request_errors(caplog) == []
    ours = [r for r in caplog.records if "verification_failed" in r.getMessage()]
    assert len(ours) == 1 and ours[0].levelname == "WARNING"
    assert operation_id in ours[0].getMessage()


@pytest.mark.parametrize("transport", ["rest", "mcp"])
def test_an_internal_error_logs_once_at_error_with_its_correlation_id(
    transport: str, make_tool: Any, alice: Any, client_for: Any, caplog: Any
) -> None:
    def context(input: Any, **kwargs: Any) -> Any:
        raise RuntimeError("db-primary.internal refused")

    definition = make_tool(context=context)
    client = client_for(alice)
    caplog.set_level("INFO")
    if transport == "rest":
        response = client.post(f"/agent/tools/{definition.name}/", {"operationId": key()},
                               format="json")
        assert response.status_code == 500
        correlation_id = response.json()["error"]["correlation_id"]
    else:  # a failure of the transport itself, before any tool: JSON-RPC with HTTP 500
        with mock.patch("guarded_tools.transports.mcp.server._require_caller", side_effect=RuntimeError("x")):  # noqa: E501
            response = mcp_post(client, "ping")
        assert response.status_code == 500
        correlation_id = response.json()["error"]["data"]["correlation_id"]
    assert request_errors(caplog) == []
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and correlation_id in errors[0].getMessage()
    assert "db-primary" not in response.content.decode()


def test_an_application_catalog_entry_is_worded_for_its_audience_too(
    make_catalog: Any, make_tool: Any, alice: Any, client_for: Any
) -> None:
    code = f"slot_taken_{key()[:6]}"
    shop = make_catalog({code: {
        "status": 409, "retry": "after_repair", "message": "The slot was taken.",
        "why": "Another booking got it first.",
        "fix": "List the slots again and book a free one.{keep_key}",
        "keyless": {"why": "Another booking got it first; nothing was booked."},
        "repair": {"action": "refresh_state", "instruction": "Read the free slots."},
    }})

    def handler(input: Any, ctx: Any) -> Any:
        raise shop.error(code)

    keyed, keyless = make_tool(handler), make_tool(handler, read_only=True,
                                                   idempotency_key=None)
    client = client_for(alice)
    first = client.post(f"/agent/tools/{keyed.name}/", {"operationId": key()},
                        format="json").json()["error"]
    assert first["fix"].endswith("Keep the same idempotency key; do not create a new one.")
    second = client.post(f"/agent/tools/{keyless.name}/", {}, format="json").json()["error"]
    assert_fits(second, code, "rest", "keyless")
    assert second["why"] == "Another booking got it first; nothing was booked."
    assert second["fix"] == "List the slots again and book a free one."


# -- derived tools read as hand-written ones ---------------------------------------------------


class Refusing(serializers.Serializer):
    """A serializer whose own validation refuses ``n`` = 13 (the schema lets it through)."""

    operationId = serializers.CharField(required=False)
    n = serializers.IntegerField()

    def validate_n(self, value: int) -> int:
        if value == 13:
            raise serializers.ValidationError("unlucky", code="invalid")
        return value


@pytest.mark.parametrize("transport", ["rest", "mcp"])
@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "keyless"])
def test_a_serializer_tools_invalid_input_has_the_catalogs_why_fix_and_link(
    keyed: bool, transport: str, make_tool: Any, alice: Any, client_for: Any
) -> None:
    options: dict[str, Any] = {} if keyed else {"read_only": True, "idempotency_key": None}
    derived = make_tool(input=Refusing, input_schema={"type": "object"}, **options)
    schema = {"type": "object", "properties": {"operationId": {"type": "string"},
                                               "n": {"type": "integer"}}}
    written = make_tool(input_schema=schema, **options)
    client = client_for(alice)

    def call(definition: Tool, n: Any) -> dict[str, Any]:
        body = {"operationId": key(), "n": n} if keyed else {"n": n}
        if transport == "rest":
            response = client.post(f"/agent/tools/{definition.name}/", body, format="json")
            assert response.status_code == 422
            return dict(response.json()["error"])
        return mcp_error(mcp_post(client, "tools/call",
                                  {"name": definition.name, "arguments": body}))

    theirs, ours = call(written, "x"), call(derived, 13)  # the schema's, the serializer's
    assert_fits(ours, "invalid_input", transport, "keyed" if keyed else "keyless")
    assert ours["issues"] == [{"path": ["n"], "keyword": "invalid", "message": "is not valid"}]
    for name in ("why", "fix", "link", "retry", "type"):
        assert ours.get(name) and ours.get(name) == theirs.get(name), (name, ours, theirs)
    assert ours["repair"]["action"] == theirs["repair"]["action"] == "change_input"
    assert "unlucky" not in json.dumps(ours)
