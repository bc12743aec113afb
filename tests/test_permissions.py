"""The permission check on every call: the same answers as ``user.has_perms``, one query."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext

from guarded_tools.permissions import has_perms

pytestmark = pytest.mark.django_db

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


@pytest.mark.parametrize("perms", CASES)
def test_answers_exactly_what_django_answers(perms: tuple[str, ...],
                                             people: dict[str, Any]) -> None:
    for name, user in people.items():
        assert has_perms(fresh(user), perms) == fresh(user).has_perms(perms), (name, perms)


def test_one_query_for_a_user_with_no_cached_permissions(people: dict[str, Any]) -> None:
    user = fresh(people["both"])
    with CaptureQueriesContext(connection) as queries:
        assert has_perms(user, ("demo.add_ordernote", "demo.view_slot"))
    assert len(queries) == 1
    with CaptureQueriesContext(connection) as queries:
        assert has_perms(fresh(people["admin"]), ("demo.add_ordernote",))
        assert not has_perms(fresh(people["inactive"]), ("demo.add_ordernote",))
    assert len(queries) == 2  # the two fresh() loads only: no permission query


def test_a_revoked_permission_is_revoked_on_the_next_call(people: dict[str, Any]) -> None:
    user = people["direct"]
    assert has_perms(fresh(user), ("demo.add_ordernote",))
    user.user_permissions.clear()
    assert not has_perms(fresh(user), ("demo.add_ordernote",))


def test_another_backend_gets_user_has_perms(people: dict[str, Any], settings: Any) -> None:
    settings.AUTHENTICATION_BACKENDS = ["tests.test_permissions.EveryoneMayAddOrderNotes",
                                        "django.contrib.auth.backends.ModelBackend"]
    assert has_perms(fresh(people["nobody"]), ("demo.add_ordernote",))
    assert not has_perms(fresh(people["nobody"]), ("demo.view_slot",))


class EveryoneMayAddOrderNotes:
    def authenticate(self, request: Any, **credentials: Any) -> None:
        return None

    def has_perm(self, user: Any, perm: str, obj: Any = None) -> bool:
        return perm == "demo.add_ordernote"
