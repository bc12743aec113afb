"""Provides the Django permission check the pipeline runs on every call, replays included.

``user.has_perms(perms)`` with Django's ``ModelBackend`` builds two querysets per
request (the user's and the groups' permissions) and loads every permission the
user has: about a millisecond and a half of ORM work on each call, for a new user
object each request. Where that backend alone decides (the default
``AUTHENTICATION_BACKENDS``) and the user model keeps Django's permission
relations, :func:`has_perms` asks the same question in one query, compiled by the
ORM once per database and set of permissions and then run with the user's key
only. Any other configuration gets ``user.has_perms`` unchanged.

The answer is the backend's: inactive users have no permission, active superusers
have all, and everyone else has what they were given directly or through a group.
Grants are never cached: a permission revoked is revoked on the next call. What
is kept per process is which rows the permissions' names denote (their keys, as
Django keeps content types), so that the query reads only the grant tables; it is
forgotten after ``migrate`` and whenever a permission or a content type is saved
or deleted in this process. A permission deleted and created again under the same
name by another process is refused here until this one forgets or restarts.
"""

from __future__ import annotations

import threading
from functools import reduce
from operator import or_
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.db import connections, models, router
from django.db.models import Q
from django.db.models.signals import post_delete, post_migrate, post_save

# django.contrib.auth is imported where it is used: only tools with ``permissions``
# need it, and the rest of the app works without it.

MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"
_SENTINEL = -918_273_645  # stands for the user's key in the compiled query

_compiled: dict[tuple[str, tuple[str, ...]], tuple[str, list[Any]]] = {}
_lock = threading.Lock()
#: Measuring only (``bench/run.py --ablation``): "perm" leaves every check to ``user.has_perms``.
_ABLATE: set[str] = set()


def has_perms(user: Any, perms: tuple[str, ...]) -> bool:
    """``user.has_perms(perms)``, in one precompiled query where that is the same answer."""
    return answer(permission_query(user, perms), perms)


def answer(decided: bool | tuple[str, list[Any]], perms: tuple[str, ...]) -> bool:
    """The answer of a ``permission_query``: as decided, or by running its query."""
    if isinstance(decided, bool):
        return decided
    sql, params = decided
    with connections[permissions_database()].cursor() as cursor:
        cursor.execute(sql, params)
        return granted(cursor.fetchall(), perms)


def permission_query(user: Any, perms: tuple[str, ...]) -> bool | tuple[str, list[Any]]:
    """The answer when no query is needed, else the query that gives it (see ``granted``).

    The query reads ``permissions_database()``; a caller that sends it itself (the
    store, in the round trip that locks a key) must send it there.
    """
    wanted = set(perms)
    if not wanted or not _checked_in_one_query(user):
        return bool(user.has_perms(perms))
    if not user.is_active:
        return False
    if user.is_superuser:
        return True
    cached = getattr(user, "_perm_cache", None)  # the backend's own cache on this object
    if cached is not None:
        return all(p in cached for p in perms)
    found = _query(permissions_database(), tuple(sorted(wanted)))
    if found is None:  # one of them does not exist: nobody holds it
        return False
    sql, params = found
    alias = permissions_database()
    pk = user._meta.pk.get_db_prep_value(user.pk, connections[alias])  # as the ORM binds it
    return sql, [pk if p == _SENTINEL else p for p in params]


def permissions_database() -> str:
    """The database alias Django's permissions are read from."""
    from django.contrib.auth.models import Permission

    return str(router.db_for_read(Permission))


def granted(rows: Any, perms: tuple[str, ...]) -> bool:
    """Whether the rows of a ``permission_query`` hold every one of ``perms``.

    The query returns the key of each of ``perms`` the user holds (once or more:
    directly and through groups), and nothing else.
    """
    return len({row[0] for row in rows}) == len(set(perms))


def _checked_in_one_query(user: Any) -> bool:
    """Only Django's ModelBackend decides, on a user with Django's permission relations."""
    backends = settings.AUTHENTICATION_BACKENDS
    if "perm" in _ABLATE or len(backends) != 1 or backends[0] != MODEL_BACKEND:
        return False
    from django.contrib.auth.models import PermissionsMixin

    # The user's class, not type(user): a session's ``request.user`` is Django's lazy
    # wrapper (``SimpleLazyObject``), whose ``__class__`` is the wrapped user's, as
    # ``isinstance`` already answers for it.
    cls = user.__class__
    return (
        isinstance(user, PermissionsMixin)
        and cls.has_perms is PermissionsMixin.has_perms
        and cls.has_perm is PermissionsMixin.has_perm
        and isinstance(cls._meta.pk, models.IntegerField)  # the key replaces an int
    )


def _query(alias: str, perms: tuple[str, ...]) -> tuple[str, list[Any]] | None:
    """The compiled query for ``perms``; None while one of them does not exist."""
    key = (alias, perms)
    found = _compiled.get(key)
    if found is None:
        with _lock:
            compiled = _compile(alias, perms)
            if compiled is None:
                return None  # not kept: it may be created by the next migrate
            found = _compiled[key] = compiled
    return found


def _compile(alias: str, perms: tuple[str, ...]) -> tuple[str, list[Any]] | None:
    """The keys among ``perms``' the sentinel user holds, directly or via a group.

    Reads the permissions' keys once (None if one of them does not exist); the
    query then touches only the grant tables, which plan and run in a fraction of
    the time a join with the permission and content type tables takes.
    """
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group, Permission

    _forget_on_change()
    named = reduce(or_, [
        Q(content_type__app_label=app_label, codename=codename)
        for app_label, _, codename in (p.partition(".") for p in perms)
    ])
    ids = sorted(Permission.objects.using(alias).filter(named).values_list("pk", flat=True))
    if len(ids) != len(perms):
        return None
    user_model = get_user_model()
    direct: Any = user_model._meta.get_field("user_permissions").remote_field.through
    membership: Any = user_model._meta.get_field("groups").remote_field.through
    via_groups: Any = Group._meta.get_field("permissions").remote_field.through
    groups = membership.objects.filter(**{_fk_to(membership, user_model): _SENTINEL})
    queryset = (
        direct.objects.using(alias)
        .filter(**{_fk_to(direct, user_model): _SENTINEL, "permission_id__in": ids})
        .values_list("permission_id")
        .order_by()
        .union(
            via_groups.objects.using(alias)
            .filter(permission_id__in=ids, group_id__in=groups.values("group_id"))
            .values_list("permission_id")
            .order_by(),
            all=True,
        )
    )
    sql, params = queryset.query.sql_with_params()
    return sql, list(params)


def _fk_to(through: Any, model: Any) -> str:
    """The attname of ``through``'s foreign key to ``model`` (``user_id`` by default)."""
    for field in through._meta.get_fields():
        if getattr(field, "related_model", None) is model and field.many_to_one:
            return str(field.attname)
    raise LookupError(f"{through.__name__} has no foreign key to {model.__name__}")


def _forget(*, setting: str, **kwargs: Any) -> None:
    if setting in ("AUTH_USER_MODEL", "DATABASES", "DATABASE_ROUTERS"):
        _compiled.clear()


def _forget_keys(**kwargs: Any) -> None:
    _compiled.clear()


def _forget_on_change() -> None:
    """Forget the permissions' keys when they may change (connected on first use)."""
    from django.contrib.auth.models import Permission
    from django.contrib.contenttypes.models import ContentType

    post_migrate.connect(_forget_keys, dispatch_uid="guarded_tools.pipeline.permissions")
    for model in (Permission, ContentType):
        for signal in (post_save, post_delete):
            signal.connect(_forget_keys, sender=model,
                           dispatch_uid=f"guarded_tools.pipeline.permissions.{model.__name__}")


setting_changed.connect(_forget)
