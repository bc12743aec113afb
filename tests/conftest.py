"""Shared fixtures: users, API clients, and test-only tools registered per test."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from guarded_tools.registry import Tool, registry
from guarded_tools.registry import tool as tool_decorator

OBJECT = {"type": "object", "properties": {"operationId": {"type": "string"}}}


@pytest.fixture
def user_factory(django_user_model: Any) -> Callable[..., Any]:
    def make(username: str | None = None, perms: tuple[str, ...] = (), **extra: Any) -> Any:
        user = django_user_model.objects.create_user(
            username=username or f"u-{uuid.uuid4().hex[:8]}", password="pw", **extra
        )
        for perm in perms:
            app_label, codename = perm.split(".")
            user.user_permissions.add(
                Permission.objects.get(content_type__app_label=app_label, codename=codename)
            )
        return type(user).objects.get(pk=user.pk)  # drop the permission cache

    return make


@pytest.fixture
def alice(user_factory: Callable[..., Any]) -> Any:
    return user_factory("alice")


@pytest.fixture
def bob(user_factory: Callable[..., Any]) -> Any:
    return user_factory("bob")


@pytest.fixture
def client_for() -> Callable[[Any], APIClient]:
    def make(user: Any) -> APIClient:
        client = APIClient()
        if user is not None:
            client.force_authenticate(user)
        return client

    return make


@pytest.fixture
def make_tool() -> Iterator[Callable[..., Tool]]:
    """Register a tool for one test; it is unregistered afterwards."""
    names: list[str] = []

    def make(handler: Callable[..., Any] | None = None, **options: Any) -> Tool:
        options.setdefault("name", f"t_{uuid.uuid4().hex[:10]}")
        options.setdefault("input_schema", OBJECT)
        options.setdefault("idempotency_key", "operationId")
        fn = handler or (lambda input, ctx: {"ok": True})
        definition = tool_decorator(**options)(fn)
        names.append(definition.name)
        return definition

    yield make
    for name in names:
        if name in registry:
            registry.unregister(name)


def key() -> str:
    return uuid.uuid4().hex


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
