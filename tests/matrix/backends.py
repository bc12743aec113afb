"""Provides a second authentication backend for the matrix: it grants, it never authenticates."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.backends import BaseBackend

#: Users whose first name is this hold every permission in ``GRANTED`` through this backend.
GRANTEE = "grantee"
GRANTED = {"auth.add_group"}


class GrantsByName(BaseBackend):
    """Grants ``GRANTED`` to active users named ``GRANTEE``, as an SSO's group map would."""

    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        if user_obj.is_active and getattr(user_obj, "first_name", "") == GRANTEE:
            return set(GRANTED)
        return set()
