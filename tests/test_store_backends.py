"""The store's backends (issue 26 item 3): chosen by the database's vendor, as Django
chooses a database backend by ENGINE, and overridden by ``STORE_CLASS``."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.db import connection, transaction
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from guarded_tools.models import Operation, OperationState
from guarded_tools.store import NestedTransaction, OperationStore
from guarded_tools.store.backends.postgresql import PostgreSQLOperationStore

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMA = {"type": "object", "properties": {"operationId": {"type": "string"},
                                           "name": {"type": "string"}},
          "required": ["operationId", "name"]}
used: list[type] = []


def effect(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"id": Group.objects.create(name=input["name"]).pk}


class CountingStore(OperationStore):
    """A site's store: the ORM's, counting its claims."""

    def claim(self, **kwargs: Any) -> Any:
        used.append(type(self))
        return super().claim(**kwargs)


class Recording(PostgreSQLOperationStore):
    def claim(self, **kwargs: Any) -> Any:
        used.append(type(self))
        return super().claim(**kwargs)


def clients(alice: Any) -> dict[str, APIClient]:
    token, session = APIClient(), APIClient()
    token.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=alice).key}")
    session.force_login(alice)
    return {"token": token, "session": session}


@pytest.mark.parametrize("auth", ["token", "session"])
@pytest.mark.parametrize("atomic", [False, True])
def test_the_default_store_is_the_vendors_and_a_site_overrides_it(
    auth: str, atomic: bool, make_tool: Any, alice: Any, settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from guarded_tools.store import backends

    definition = make_tool(effect, input_schema=SCHEMA, atomic=atomic)
    client = clients(alice)[auth]
    # The default: PostgreSQL's backend there, the ORM's store elsewhere.
    backends.store_class.cache_clear()
    monkeypatch.setitem(backends.BACKENDS, "postgresql", f"{__name__}.Recording")
    used.clear()
    body = {"operationId": uuid.uuid4().hex, "name": f"g-{uuid.uuid4().hex[:8]}"}
    response = client.post(f"/agent/tools/{definition.name}/", body, format="json")
    backends.store_class.cache_clear()
    assert response.status_code == 200, response.content
    claimed = used == [Recording] if connection.vendor == "postgresql" else used == []
    assert claimed or (atomic and used == []), used  # an atomic tool may lock, not claim
    assert Operation.objects.get(key=body["operationId"]).state == OperationState.SUCCEEDED
    # A site's STORE_CLASS wins over the vendor's.
    settings.GUARDED_TOOLS = {**(getattr(settings, "GUARDED_TOOLS", None) or {}),
                              "STORE_CLASS": f"{__name__}.CountingStore",
                              "ATOMIC_SINGLE_TRANSACTION": False}
    used.clear()
    body = {"operationId": uuid.uuid4().hex, "name": f"g-{uuid.uuid4().hex[:8]}"}
    response = client.post(f"/agent/tools/{definition.name}/", body, format="json")
    assert response.status_code == 200, response.content
    assert used == [CountingStore]
    again = client.post(f"/agent/tools/{definition.name}/", body, format="json")
    assert again.status_code == 200 and again.json()["operation"]["replayed"] is True
    assert again.json()["output"] == response.json()["output"]
    assert Group.objects.filter(name=body["name"]).count() == 1


@pytest.mark.parametrize("store", [OperationStore, PostgreSQLOperationStore])
def test_each_store_refuses_to_claim_inside_a_callers_transaction(store: type) -> None:
    if store is PostgreSQLOperationStore and connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's store")
    with pytest.raises(NestedTransaction), transaction.atomic():
        store().claim(tool="t", scope="s", key="k", fp="f", input={}, user=None,
                      lease_seconds=30)
    assert not Operation.objects.exists()
