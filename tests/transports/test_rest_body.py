"""A REST tool call's body: parsed once by the strict parser, whoever reads it first.

The tool endpoint hands DRF's ``Request`` one ``ParsedOnce`` as its parser, as the MCP
endpoint does: the view, a permission class, the handler (``ctx.request.data``) and the
site's ``EXCEPTION_HANDLER`` all read the same parse. A view whose ``parser_classes``
a site changed keeps DRF's parsers.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client as DjangoClient
from rest_framework.parsers import JSONParser
from rest_framework.permissions import BasePermission
from rest_framework.test import APIClient

from guarded_tools.transports.rest.base import GuardedAPIView
from guarded_tools.transports.rest.body import ParsedOnce
from guarded_tools.transports.rest.views import ToolCallView
from tests.conftest import key

pytestmark = pytest.mark.django_db

URL = "/agent/tools/{}/"


def post(client: Any, name: str, body: str) -> Any:
    return client.post(URL.format(name), body, content_type="application/json")


def test_the_body_is_parsed_once_whoever_reads_it(alice: Any, client_for: Any, make_tool: Any,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 parses: list[bytes]) -> None:
    read: list[Any] = []
    tool = make_tool(lambda input, ctx: read.append((ctx.request.data, ctx.request.parsers))
                     or {"n": input["n"]})
    agent = client_for(alice)
    body = {"operationId": key(), "n": 1}
    answer = post(agent, tool.name, json.dumps(body))
    assert answer.status_code == 200, answer.content[:300]
    assert answer.json()["output"] == {"n": 1}
    assert read[0][0] == body
    assert [type(parser) for parser in read[0][1]] == [ParsedOnce]
    assert len(parses) == 1

    # A permission class that reads the body first: the view calls with what it parsed.
    class ReadsTheBody(BasePermission):
        def has_permission(self, request: Any, view: Any) -> bool:
            return request.data.get("n") != 13

    monkeypatch.setattr(ToolCallView, "permission_classes", [ReadsTheBody])
    parses.clear()
    again = post(agent, tool.name, json.dumps({"operationId": key(), "n": 2}))
    assert again.json()["output"] == {"n": 2}
    assert len(parses) == 1
    parses.clear()
    refused = post(agent, tool.name, json.dumps({"operationId": key(), "n": 13}))
    assert refused.status_code == 403
    assert len(parses) == 1


def test_a_sites_exception_handler_reads_the_parsed_body(make_tool: Any, parses: list[bytes],
                                                         handler_reads: list[Any]) -> None:
    closed = make_tool()  # not open to anonymous callers: 401 after the body is read
    refused = post(DjangoClient(), closed.name, '{"operationId": "k"}')
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "not_authenticated"
    assert handler_reads == [{"operationId": "k"}]
    assert len(parses) == 1

    # A body that does not parse: refused as malformed, the handler reading it empty.
    handler_reads.clear()
    parses.clear()
    broken = post(APIClient(), closed.name, '{"operationId": "a", "operationId": "b"}')
    assert broken.status_code == 400 and broken.json()["error"]["code"] == "malformed_request"
    assert len(handler_reads) == 1 and not handler_reads[0]
    assert len(parses) == 1


def test_a_view_with_its_own_parser_classes_keeps_drfs(alice: Any, client_for: Any,
                                                      make_tool: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    tool = make_tool(lambda input, ctx: {"parsers": [type(p).__name__
                                                     for p in ctx.request.parsers]})
    monkeypatch.setattr(ToolCallView, "parser_classes", [JSONParser])
    agent = client_for(alice)
    answer = post(agent, tool.name, json.dumps({"operationId": key()}))
    assert answer.json()["output"] == {"parsers": ["JSONParser"]}
    # DRF's JSONParser keeps the last of two equal keys, where the strict parser refuses.
    twice = post(agent, tool.name, f'{{"operationId": "{key()}", "operationId": "{key()}"}}')
    assert twice.status_code == 200, twice.content[:300]
    assert GuardedAPIView.parser_classes != ToolCallView.parser_classes
