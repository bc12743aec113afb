"""Provides ``OneQueryModelBackend``: Django's ``ModelBackend``, answering permissions in one query.

Django's ``ModelBackend`` loads a user's permissions with two queries (the user's own, then
their groups') the first time ``user.has_perm``/``has_perms``/``get_all_permissions`` is
asked on a user object, and keeps the set on that object. Every agent call checks its
tool's ``permissions`` with ``user.has_perms`` on a user authenticated for that request, so
it pays those two queries on every call. A site that lists this backend instead of
``ModelBackend``::

    AUTHENTICATION_BACKENDS = ["guarded_tools.auth_backends.OneQueryModelBackend"]

gets the same set in one query (a ``UNION`` of both), everywhere ``has_perm`` is asked: the
tool calls, the tool list, the confirmation queue, the admin. Everything else is
``ModelBackend``'s: authentication, ``get_user_permissions``, ``get_group_permissions``,
``with_perm``, and the answers themselves (inactive users have no permission, an active
superuser has every permission that exists, anyone else has what they hold directly or
through a group; object permissions are left to other backends).

What is cached is what ``ModelBackend`` caches, where it caches it: the set of
``"app_label.codename"`` of an active user, on that user object, for as long as the object
lives (a request). ``ModelBackend.get_all_permissions`` checks the user and keeps the set;
only the loading of the set is this backend's (it sits after ``ModelBackend`` in the method
resolution order). A permission revoked is therefore revoked on the next request, as with
``ModelBackend``.
"""

from __future__ import annotations

import functools
from typing import Any

from django.apps import apps
from django.contrib.auth.backends import BaseBackend, ModelBackend
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connections, router

__all__ = ["OneQueryModelBackend"]


class _PermissionsInOneQuery(BaseBackend):
    """Loads the set ``ModelBackend.get_all_permissions`` caches, in one query.

    The query's text is written once per database from the models' ``_meta`` (their tables
    and the columns of the many-to-many tables: a custom user model's included) and sent
    through ``connection.cursor()``: building the same ``UNION`` with the ORM on every
    request cost more CPU than the second query it saves.
    """

    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        using = router.db_for_read(Permission)
        if user_obj.is_superuser:
            names = ("content_type__app_label", "codename")
            rows: Any = Permission.objects.using(using).values_list(*names).order_by()
            return {f"{app_label}.{codename}" for app_label, codename in rows}
        pk = type(user_obj)._meta.pk.get_db_prep_value(user_obj.pk, connections[using])
        with connections[using].cursor() as cursor:
            cursor.execute(_query(using, user_obj._meta.label), [pk, pk])
            return {f"{app_label}.{codename}" for app_label, codename in cursor.fetchall()}


def _column_to(through: Any, model: Any) -> str:
    """The column of ``through`` (a many-to-many table) that points at ``model``."""
    return next(f.column for f in through._meta.get_fields()
                if getattr(f, "related_model", None) is model and getattr(f, "column", None))


@functools.lru_cache(maxsize=16)
def _query(using: str, user_label: str) -> str:
    """The one query, for the user model ``user_label`` on database ``using``: the
    permissions the user holds directly or through a group, with their app labels."""
    quote = connections[using].ops.quote_name
    user_model = apps.get_model(user_label)
    own: Any = user_model._meta.get_field("user_permissions").remote_field.through
    member: Any = user_model._meta.get_field("groups").remote_field.through
    granted: Any = Group._meta.get_field("permissions").remote_field.through
    content_type = Permission._meta.get_field("content_type")
    table = {m: quote(m._meta.db_table) for m in (own, member, granted, Permission,
                                                  ContentType)}
    return (
        f"SELECT ct.{quote('app_label')}, p.{quote('codename')}"  # noqa: S608 - quoted names from _meta; values are parameters
        f" FROM {table[Permission]} p"
        f" INNER JOIN {table[ContentType]} ct"
        f" ON ct.{quote('id')} = p.{quote(content_type.column)}"
        f" WHERE p.{quote('id')} IN ("
        f"SELECT o.{quote(_column_to(own, Permission))} FROM {table[own]} o"
        f" WHERE o.{quote(_column_to(own, user_model))} = %s"
        f" UNION SELECT g.{quote(_column_to(granted, Permission))} FROM {table[granted]} g"
        f" INNER JOIN {table[member]} m"
        f" ON m.{quote(_column_to(member, Group))} = g.{quote(_column_to(granted, Group))}"
        f" WHERE m.{quote(_column_to(member, user_model))} = %s)"
    )


class OneQueryModelBackend(ModelBackend, _PermissionsInOneQuery):
    """``ModelBackend`` whose permission set is loaded in one query instead of two."""
