"""The OpenAPI document, and schemathesis fuzzing the live site against it."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from jsonschema import Draft202012Validator
from rest_framework.authtoken.models import Token

from guarded_tools.registry import registry

PERMS = ("demo.change_order", "demo.add_ledgerentry")


@pytest.mark.django_db
def test_every_tool_has_a_path_with_its_schemas(user_factory: Any, client_for: Any) -> None:
    agent = user_factory("agent", perms=PERMS)
    document = client_for(agent).get("/agent/openapi.json").json()
    assert document["openapi"] == "3.1.0"
    for definition in registry:
        operation = document["paths"][f"/agent/tools/{definition.name}/"]["post"]
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        assert body == dict(definition.input_schema)
        ok = operation["responses"]["200"]["content"]["application/json"]["schema"]
        if definition.output_schema:
            assert ok["properties"]["output"] == dict(definition.output_schema)
        for status in ("400", "401", "403", "409", "413", "422", "500"):
            error = operation["responses"][status]["content"]["application/json"]["schema"]
            assert error == {"$ref": "#/components/schemas/GuardedToolsError"}
        assert ("202" in operation["responses"]) == bool(definition.confirm_mode)
    Draft202012Validator.check_schema(document["components"]["schemas"]["GuardedToolsError"])
    assert "/agent/tools/{name}/" not in document["paths"]


@pytest.mark.django_db
def test_the_document_lists_only_callable_tools(alice: Any, client_for: Any) -> None:
    paths = client_for(alice).get("/agent/openapi.json").json()["paths"]
    assert "/agent/tools/list_orders/" in paths
    assert "/agent/tools/send_payment/" not in paths  # needs demo.add_ledgerentry


@pytest.mark.django_db
def test_swagger_page_points_at_the_document(alice: Any, client_for: Any) -> None:
    page = client_for(alice).get("/agent/docs/")
    assert page.status_code == 200 and b"/agent/openapi.json" in page.content


@pytest.fixture
def agent_token(transactional_db: Any, user_factory: Any) -> str:
    from project.demo.models import Account, Order, Slot

    agent = user_factory("fuzz-agent", perms=PERMS)
    Order.objects.create(number="F-1", customer=agent, total=1)
    Account.objects.create(owner=agent, name="A", balance=10)
    from django.utils import timezone

    Slot.objects.create(starts_at=timezone.now(), resource="R")
    return Token.objects.create(user=agent).key


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_schemathesis_finds_no_5xx_and_no_schema_violation(live_server: Any,
                                                           agent_token: str) -> None:
    """Fuzz every documented operation (bounded examples) against the live site."""
    from rest_framework.test import APIClient
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        negative_data_rejection,
        response_schema_conformance,
        status_code_conformance,
    )

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {agent_token}")
    document = client.get("/agent/openapi.json").json()
    schema = schemathesis.openapi.from_dict(document)
    checks = [not_a_server_error, status_code_conformance, content_type_conformance,
              response_schema_conformance, negative_data_rejection]
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= len(registry) + 4
    for operation in operations:

        @settings(max_examples=12, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def run(case: Any) -> None:
            case.call_and_validate(base_url=live_server.url,
                                   headers={"Authorization": f"Token {agent_token}"},
                                   checks=checks)

        run()
