"""Provides ``TokenAuthentication``: DRF's token authentication, its one query written once.

DRF's ``TokenAuthentication`` reads the token and its user with
``Token.objects.select_related("user").get(key=key)``: the ORM builds and compiles that
query on every request, which costs an agent's call more CPU than sending the query and
reading its row. A site that lists this class instead of DRF's::

    REST_FRAMEWORK = {
        "DEFAULT_AUTHENTICATION_CLASSES": [
            "guarded_tools.authentication.TokenAuthentication",
            "rest_framework.authentication.SessionAuthentication",
        ],
    }

sends the same one query (the token joined with its user, by the token's key) as text
written once per database and token model from the models' ``_meta``, through
``connection.cursor()``, and builds the two objects with ``Model.from_db``, as the ORM
does. Everything else is DRF's: the ``Authorization: Token …`` header and its errors,
``keyword``, ``model`` (a site's own token model, with a ``key`` and a ``user``), the
answers (``(user, token)``; "Invalid token." for an unknown key, "User inactive or
deleted." for an inactive user) and the challenge. A database whose driver returns values
the ORM would convert (SQLite's dates are text; the store's backends say which databases
do not) is read through DRF's own query.
"""

from __future__ import annotations

import functools
from typing import Any

from django.db import connections, router
from django.utils.translation import gettext_lazy as _
from rest_framework import HTTP_HEADER_ENCODING, authentication, exceptions

from guarded_tools.store.backends import features

__all__ = ["TokenAuthentication"]

@functools.lru_cache(maxsize=16)
def _statement(using: str, token_label: str) -> tuple[str, list[Any], list[Any], Any, Any]:
    """The query, the concrete fields of the token and of its user in its columns'
    order, the token's key field and the user model, for the token model ``token_label``
    on database ``using``."""
    from django.apps import apps

    quote = connections[using].ops.quote_name
    token_model = apps.get_model(token_label)
    user_field = token_model._meta.get_field("user")
    user_model = user_field.related_model
    token_fields = list(token_model._meta.concrete_fields)
    user_fields = list(user_model._meta.concrete_fields)
    t, u = quote(token_model._meta.db_table), quote(user_model._meta.db_table)
    columns = [f"{t}.{quote(f.column)}" for f in token_fields] + [
        f"{u}.{quote(f.column)}" for f in user_fields]
    key = token_model._meta.get_field("key")
    sql = (f"SELECT {', '.join(columns)} FROM {t} INNER JOIN {u}"  # noqa: S608 - quoted names from _meta; the key is a parameter
           f" ON ({t}.{quote(user_field.column)} = {u}.{quote(user_field.target_field.column)})"
           f" WHERE {t}.{quote(key.column)} = %s")
    return sql, token_fields, user_fields, key, user_model


class TokenAuthentication(authentication.TokenAuthentication):
    """DRF's ``TokenAuthentication``, its query's text written once (module doc)."""

    def authenticate(self, request: Any) -> tuple[Any, Any] | None:
        """DRF's, reading the ``Authorization`` header from ``META`` by name (DRF's reads
        ``request.headers``, which is built from every header of the request first)."""
        raw = request.META.get("HTTP_AUTHORIZATION")
        if raw is None:
            return None  # no credentials of this kind: DRF's answer
        auth = (raw.encode(HTTP_HEADER_ENCODING) if isinstance(raw, str) else raw).split()
        if (len(auth) == 2 and auth[0].lower() == self.keyword.lower().encode()
                and auth[1].isascii()):
            return self.authenticate_credentials(auth[1].decode())
        return super().authenticate(request)  # type: ignore[no-any-return]  # DRF's refusals

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        model: Any = self.get_model()  # DRF's Token, or a site's with a key and a user
        using = router.db_for_read(model)
        connection = connections[using]
        if not features(connection).rows_need_no_converters:
            return super().authenticate_credentials(key)  # type: ignore[no-any-return]
        sql, token_fields, user_fields, key_field, user_model = _statement(
            using, model._meta.label)
        with connection.cursor() as cursor:
            cursor.execute(sql, [key_field.get_db_prep_value(key, connection)])
            row = cursor.fetchone()
        if row is None:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        values = [f.from_db_value(value, None, connection)
                  if value is not None and hasattr(f, "from_db_value") else value
                  for f, value in zip(token_fields + user_fields, row, strict=True)]
        split = len(token_fields)
        token = model.from_db(using, [f.attname for f in token_fields], values[:split])
        user: Any = user_model.from_db(using, [f.attname for f in user_fields], values[split:])
        token.user = user  # as select_related("user") attaches it: no query later
        if not user.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        return user, token
