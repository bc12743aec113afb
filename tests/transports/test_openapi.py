"""The OpenAPI document, and schemathesis fuzzing the live site against it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from jsonschema import Draft202012Validator
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from guarded_tools import registry

PERMS = ("demo.change_order", "demo.add_ledgerentry", "demo.add_order", "demo.delete_order")


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
def test_the_document_says_whose_tools_it_lists_and_how_to_see_yours(
    alice: Any, session_client_for: Any
) -> None:
    """Anonymous: no tools, and why (the list depends on who calls) and how to
    authenticate; by token or session: the tools that caller may call, and whose."""
    from rest_framework.test import APIClient

    anonymous = APIClient().get("/agent/openapi.json").json()
    assert [p for p in anonymous["paths"] if p.startswith("/agent/tools/")
            and "{" not in p and p != "/agent/tools/"] == []
    note = anonymous["info"]["description"]
    assert "you are not signed in" in note and "depends on who calls" in note, note
    assert "[log in](/accounts/login/?next=%2Fagent%2Fdocs%2F)" in note, note  # LOGIN_URL
    assert "`Authorization` header" in note and "`GET tools/`" in note
    token = APIClient()
    token.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=alice).key}")
    for client in (token, session_client_for(alice)):
        document = client.get("/agent/openapi.json").json()
        count = len([p for p in document["paths"] if p.startswith("/agent/tools/")
                     and "{" not in p and p != "/agent/tools/"])
        assert count > 0
        note = document["info"]["description"]
        assert f"this list shows the {count} tools `alice` may call" in note, note
        assert "depends on who calls" in note and "not signed in" not in note


SIDECAR = "/static/drf_spectacular_sidecar/swagger-ui-dist/"


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/agent/docs/", "/agent/docs"])
def test_swagger_page_points_at_the_document(alice: Any, client_for: Any, path: str) -> None:
    pytest.importorskip("drf_spectacular_sidecar")  # in requirements; see the 501 test below
    page = client_for(alice).get(path, HTTP_ACCEPT="text/html")
    assert page.status_code == 200 and page["Content-Type"].startswith("text/html")
    text = page.content.decode()
    assert 'url: "/agent/openapi.json"' in text
    assert "SwaggerUIBundle(" in text and 'id="swagger-ui"' in text
    assert "Django REST framework" not in text  # not DRF's page around the view's data


@pytest.mark.django_db
@pytest.mark.parametrize("dist", ["SIDECAR", "https://cdn.jsdelivr.net/npm/swagger-ui-dist@latest"])
def test_swagger_ui_comes_from_the_packaged_sidecar(alice: Any, client_for: Any, dist: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether the site says SIDECAR or keeps drf-spectacular's default (a CDN at @latest)."""
    from drf_spectacular.settings import SPECTACULAR_DEFAULTS, spectacular_settings

    pytest.importorskip("drf_spectacular_sidecar")
    monkeypatch.setattr(spectacular_settings, "SWAGGER_UI_DIST", dist)
    monkeypatch.setattr(spectacular_settings, "SWAGGER_UI_FAVICON_HREF",
                        SPECTACULAR_DEFAULTS["SWAGGER_UI_FAVICON_HREF"])
    text = client_for(alice).get("/agent/docs/").content.decode()
    for name in ("swagger-ui.css", "swagger-ui-bundle.js", "swagger-ui-standalone-preset.js",
                 "favicon-32x32.png"):
        assert f'"{SIDECAR}{name}"' in text, name
    assert "cdn." not in text and "@latest" not in text


@pytest.mark.django_db
def test_a_site_chosen_swagger_ui_dist_is_kept(alice: Any, client_for: Any,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from drf_spectacular.settings import spectacular_settings

    monkeypatch.setattr(spectacular_settings, "SWAGGER_UI_DIST", "/static/vendor/swagger-ui")
    text = client_for(alice).get("/agent/docs/").content.decode()
    assert '<script src="/static/vendor/swagger-ui/swagger-ui-bundle.js">' in text


@pytest.mark.django_db
@pytest.mark.parametrize("missing", [{"drf_spectacular_sidecar"},
                                     {"drf_spectacular"}])
def test_without_the_sidecar_the_docs_page_says_what_to_install(
        alice: Any, client_for: Any, settings: Any, missing: set[str]) -> None:
    settings.INSTALLED_APPS = [a for a in settings.INSTALLED_APPS if a not in missing]
    page = client_for(alice).get("/agent/docs/")
    assert page.status_code == 501 and page["Content-Type"].startswith("text/html")
    text = page.content.decode()
    assert 'pip install "guarded-tools[openapi]"' in text and "drf_spectacular_sidecar" in text
    assert 'href="/agent/openapi.json"' in text
    assert "<script" not in text and "cdn." not in text


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
    import schemathesis  # here: only the worker that runs this test pays for its import
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


# -- a site that follows the docs: no DEFAULT_SCHEMA_CLASS, or no drf-spectacular ----------
@pytest.mark.django_db
def test_the_document_needs_no_default_schema_class(
        alice: Any, client_for: Any, session_client_for: Any, settings: Any) -> None:
    """A site that never set REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"] (DRF's own AutoSchema
    then, which drf-spectacular refuses) gets the document, by token and by session."""
    from drf_spectacular.validation import validate_schema

    settings.REST_FRAMEWORK = {k: v for k, v in settings.REST_FRAMEWORK.items()
                               if k != "DEFAULT_SCHEMA_CLASS"}
    from rest_framework.settings import api_settings

    assert api_settings.DEFAULT_SCHEMA_CLASS.__module__ == "rest_framework.schemas.openapi"
    token = APIClient()
    token.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=alice).key}")
    for client in (token, session_client_for(alice), client_for(alice)):
        answer = client.get("/agent/openapi.json")
        assert answer.status_code == 200, answer.content[:600]
        document = answer.json()
        assert document["openapi"] == "3.1.0"
        assert "/agent/tools/list_orders/" in document["paths"]
        assert document["paths"]["/agent/operations/{id}/"]["get"]["tags"] == ["guarded_tools"]
        validate_schema(document)  # against the OpenAPI 3.1 specification's JSON Schema


@pytest.mark.django_db
def test_without_drf_spectacular_the_document_says_what_to_install(
        alice: Any, session_client_for: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    for name in [n for n in sys.modules if n.split(".")[0] == "drf_spectacular"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delitem(sys.modules, "guarded_tools.transports.rest.openapi", raising=False)
    monkeypatch.setitem(sys.modules, "drf_spectacular", None)  # not importable
    with pytest.raises(ImportError):
        import drf_spectacular  # noqa: F401
    token = APIClient()
    token.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=alice).key}")
    for client in (token, session_client_for(alice), APIClient()):
        answer = client.get("/agent/openapi.json")
        assert answer.status_code == 501, answer.content[:600]
        error = answer.json()["error"]
        assert error["code"] == "openapi_not_installed" and error["retry"] == "never"
        assert 'pip install "guarded-tools[openapi]"' in error["message"]
        assert "GET tools/" in error["fix"]
