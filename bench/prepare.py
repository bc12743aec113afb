"""``python -m bench.prepare``: migrate, create the cache table, the bench user and its token.

Prints the token. Run with ``DJANGO_SETTINGS_MODULE=bench.settings`` and the database
to benchmark in ``DATABASE_URL`` (or the SQLite file in ``GT_SQLITE_PATH``).
"""

from __future__ import annotations

import os

TOKEN = "bench-token-00000000000000000000000000"


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django

    django.setup()
    from django.contrib.auth.models import Permission, User
    from django.core.management import call_command
    from rest_framework.authtoken.models import Token

    call_command("migrate", verbosity=0, interactive=False)
    call_command("createcachetable", verbosity=0)
    user, _ = User.objects.get_or_create(username="bench", defaults={"is_active": True})
    user.user_permissions.add(Permission.objects.get(content_type__app_label="bench",
                                                     codename="add_item"))
    Token.objects.filter(user=user).delete()
    Token.objects.create(user=user, key=TOKEN)
    User.objects.filter(username="bench-admin").exists() or User.objects.create_superuser(
        "bench-admin", "admin@example.invalid", None)
    print(TOKEN)


if __name__ == "__main__":
    main()
