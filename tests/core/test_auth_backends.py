"""``OneQueryModelBackend``: exactly ``ModelBackend``'s answers, the permission set in one query."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext

pytestmark = pytest.mark.django_db

MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"
ONE_QUERY = "guarded_tools.auth_backends.OneQueryModelBackend"

CASES = [
    (),
    ("demo.add_ordernote",),
    ("demo.add_ordernote", "demo.view_slot"),
    ("demo.view_slot",),
    ("auth.add_user",),
    ("demo.add_ordernote", "auth.add_user"),
    ("nosuch.perm",),
    ("no_dot",),
]


def grant(user: Any, *codenames: str) -> None:
    for name in codenames:
        app_label, codename = name.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename))


@pytest.fixture
def people(user_factory: Any, django_user_model: Any) -> dict[str, Any]:
    direct = user_factory("direct")
    grant(direct, "demo.add_ordernote")
    grouped = user_factory("grouped")
    group = Group.objects.create(name="viewers")
    group.permissions.add(Permission.objects.get(content_type__app_label="demo",
                                                 codename="view_slot"))
    grouped.groups.add(group)
    both = user_factory("both")
    grant(both, "demo.add_ordernote")
    both.groups.add(group)
    inactive = user_factory("inactive")
    grant(inactive, "demo.add_ordernote")
    inactive.is_active = False
    inactive.save()
    admin = django_user_model.objects.create_superuser("root", password="pw")
    nobody = user_factory("nobody")
    return {"direct": direct, "grouped": grouped, "both": both, "inactive": inactive,
            "admin": admin, "nobody": nobody}


def fresh(user: Any) -> Any:
    """A new object, as authentication gives every request (no permission cache)."""
    return type(user).objects.get(pk=user.pk)


def answers(user: Any, perms: tuple[str, ...]) -> tuple[Any, ...]:
    """Everything a site asks of the backends about ``user``, on new objects each time."""
    return (fresh(user).has_perms(perms), [fresh(user).has_perm(p) for p in perms],
            fresh(user).get_all_permissions(), fresh(user).get_user_permissions(),
            fresh(user).get_group_permissions(),
            fresh(user).has_module_perms("demo"))


@pytest.mark.parametrize("perms", CASES)
def test_answers_exactly_what_model_backend_answers(
    perms: tuple[str, ...], people: dict[str, Any], settings: Any
) -> None:
    settings.AUTHENTICATION_BACKENDS = [MODEL_BACKEND]
    expected = {name: answers(user, perms) for name, user in people.items()}
    settings.AUTHENTICATION_BACKENDS = [ONE_QUERY]
    for name, user in people.items():
        assert answers(user, perms) == expected[name], (name, perms)


def test_the_permission_set_is_one_query_and_kept_on_the_user(
    people: dict[str, Any], settings: Any
) -> None:
    settings.AUTHENTICATION_BACKENDS = [ONE_QUERY]
    perms = ("demo.add_ordernote", "demo.view_slot")
    for name in ("both", "admin", "nobody"):
        user = fresh(people[name])
        with CaptureQueriesContext(connection) as queries:
            assert user.has_perms(perms) == (name != "nobody")
            user.has_perm("demo.view_slot")
            user.get_all_permissions()
        # One query (a superuser's: for get_all_permissions), then ModelBackend's own cache.
        assert len(queries) == 1, (name, queries.captured_queries)
    settings.AUTHENTICATION_BACKENDS = [MODEL_BACKEND]
    with CaptureQueriesContext(connection) as queries:
        fresh(people["both"]).has_perms(perms)
    assert len(queries) == 3  # the user, then Django's two


def test_a_revoked_permission_is_revoked_on_the_next_request(
    people: dict[str, Any], settings: Any
) -> None:
    settings.AUTHENTICATION_BACKENDS = [ONE_QUERY]
    user = people["direct"]
    assert fresh(user).has_perms(("demo.add_ordernote",))
    user.user_permissions.clear()
    assert not fresh(user).has_perms(("demo.add_ordernote",))


def test_a_lazy_session_user_gets_the_same_answers(people: dict[str, Any], settings: Any) -> None:
    """``request.user`` in a session is Django's lazy wrapper."""
    from django.utils.functional import SimpleLazyObject

    settings.AUTHENTICATION_BACKENDS = [ONE_QUERY]
    perms = ("demo.add_ordernote", "demo.view_slot")
    for name, user in people.items():
        expected = fresh(user).has_perms(perms)
        lazy = SimpleLazyObject(lambda user=user: fresh(user))
        assert lazy.has_perms(perms) == expected, name


def test_a_tool_call_and_the_tool_list_ask_the_sites_backends(
    people: dict[str, Any], settings: Any
) -> None:
    """Another backend decides too: the guard asks ``user.has_perms``, nothing of its own."""
    from rest_framework.test import APIClient

    from guarded_tools import registry

    settings.AUTHENTICATION_BACKENDS = ["tests.core.test_auth_backends.EveryoneMayAddOrderNotes",
                                        ONE_QUERY]
    needing = [t.name for t in registry if tuple(t.permissions) == ("demo.change_order",)]
    client = APIClient()
    client.force_authenticate(fresh(people["nobody"]))
    listed = {t["name"] for t in client.get("/agent/tools/").json()["tools"]}
    assert needing and set(needing) <= listed
    settings.AUTHENTICATION_BACKENDS = [ONE_QUERY]
    client.force_authenticate(fresh(people["nobody"]))
    listed = {t["name"] for t in client.get("/agent/tools/").json()["tools"]}
    assert not set(needing) & listed


class EveryoneMayAddOrderNotes:
    def authenticate(self, request: Any, **credentials: Any) -> None:
        return None

    def has_perm(self, user: Any, perm: str, obj: Any = None) -> bool:
        return perm == "demo.change_order"
