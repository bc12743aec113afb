"""The permission check on every call: the same answers as ``user.has_perms``, one query."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext

from guarded_tools.pipeline import permissions
from guarded_tools.pipeline.permissions import has_perms

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


@pytest.fixture(autouse=True)
def forgotten_keys() -> None:
    """Each test starts as a process that never asked about any permission."""
    permissions._compiled.clear()


def test_one_query_for_a_user_with_no_cached_permissions(people: dict[str, Any]) -> None:
    perms = ("demo.add_ordernote", "demo.view_slot")
    with CaptureQueriesContext(connection) as queries:
        assert has_perms(fresh(people["both"]), perms)
    assert len(queries) == 3  # the user; once per process, the permissions' keys; grants
    assert "auth_permission" in queries[1]["sql"]
    user = fresh(people["both"])
    with CaptureQueriesContext(connection) as queries:
        assert has_perms(user, perms)
    assert len(queries) == 1
    assert "auth_permission" not in queries[0]["sql"]  # the grant tables only
    with CaptureQueriesContext(connection) as queries:
        assert has_perms(fresh(people["admin"]), ("demo.add_ordernote",))
        assert not has_perms(fresh(people["inactive"]), ("demo.add_ordernote",))
    assert len(queries) == 2  # the two fresh() loads only: no permission query


def test_a_revoked_permission_is_revoked_on_the_next_call(people: dict[str, Any]) -> None:
    user = people["direct"]
    assert has_perms(fresh(user), ("demo.add_ordernote",))
    user.user_permissions.clear()
    assert not has_perms(fresh(user), ("demo.add_ordernote",))


def test_a_permission_that_does_not_exist_yet_is_asked_for_again(people: dict[str, Any]) -> None:
    """Nobody holds a permission that does not exist; once created and granted, it counts."""
    from django.contrib.contenttypes.models import ContentType

    user = people["direct"]
    assert not has_perms(fresh(user), ("demo.approve_ordernote",))
    created = Permission.objects.create(
        codename="approve_ordernote", name="Can approve order notes",
        content_type=ContentType.objects.get(app_label="demo", model="ordernote"))
    user.user_permissions.add(created)
    assert has_perms(fresh(user), ("demo.approve_ordernote",))
    assert has_perms(fresh(user), ("demo.approve_ordernote",)) == fresh(user).has_perms(
        ("demo.approve_ordernote",))


def test_a_permission_created_again_under_its_name_is_found(people: dict[str, Any]) -> None:
    """Deleting or saving a permission in this process forgets the keys it had."""
    user = people["direct"]
    assert has_perms(fresh(user), ("demo.add_ordernote",))
    old = Permission.objects.get(content_type__app_label="demo", codename="add_ordernote")
    content_type, name = old.content_type, old.name
    old.delete()  # its grants go with it
    assert not has_perms(fresh(user), ("demo.add_ordernote",))
    again = Permission.objects.create(codename="add_ordernote", name=name,
                                      content_type=content_type)
    user.user_permissions.add(again)
    assert has_perms(fresh(user), ("demo.add_ordernote",))


def test_migrate_forgets_the_keys(people: dict[str, Any]) -> None:
    from django.apps import apps
    from django.db.models.signals import post_migrate

    assert has_perms(fresh(people["direct"]), ("demo.add_ordernote",))
    assert permissions._compiled
    post_migrate.send(sender=apps.get_app_config("demo"), app_config=apps.get_app_config("demo"),
                      verbosity=0, interactive=False, using="default", plan=[], apps=apps)
    assert not permissions._compiled


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


def test_a_lazy_session_user_is_answered_in_one_query(people: dict[str, Any]) -> None:
    """``request.user`` in a session is Django's lazy wrapper: the same fast path."""
    from django.utils.functional import SimpleLazyObject

    perms = ("demo.add_ordernote", "demo.view_slot")
    has_perms(fresh(people["both"]), perms)  # the permissions' keys, once per process
    for name, user in people.items():
        expected = fresh(user).has_perms(perms)
        lazy = SimpleLazyObject(lambda user=user: fresh(user))
        with CaptureQueriesContext(connection) as queries:
            assert has_perms(lazy, perms) == expected, name
        assert len(queries) <= 2, name  # the user (when active, not super); the grants
