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

from typing import Any

from django.contrib.auth.backends import BaseBackend, ModelBackend
from django.contrib.auth.models import Permission


class _PermissionsInOneQuery(BaseBackend):
    """Loads the set ``ModelBackend.get_all_permissions`` caches, in one query."""

    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        names = ("content_type__app_label", "codename")
        if user_obj.is_superuser:
            rows: Any = Permission.objects.values_list(*names).order_by()
        else:
            rows = (
                user_obj.user_permissions.values_list(*names).order_by()
                .union(Permission.objects.filter(group__in=user_obj.groups.all())
                       .values_list(*names).order_by())
            )
        return {f"{app_label}.{codename}" for app_label, codename in rows}


class OneQueryModelBackend(ModelBackend, _PermissionsInOneQuery):
    """``ModelBackend`` whose permission set is loaded in one query instead of two."""
