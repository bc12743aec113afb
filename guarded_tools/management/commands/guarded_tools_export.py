"""Export the audit trail, operations or confirmations to a file, as the admin's lists do.

    manage.py guarded_tools_export audit --filter "action=approve" --filter
        "created_at__gte=2026-12-01" --format jsonl --output /var/exports/audit-%Y%m%d.jsonl

The filters are the admin list's query string, one ``name=value`` per ``--filter`` (copy them
from the list's address): the export holds what the list shows with them, every page of it.
``--output`` may hold ``strftime`` fields (the date of the run, UTC), so a schedule (cron,
Celery beat) writes one file per run; ``-`` writes to standard output. Each run is audited
(its actor is ``--user``, or nobody for a scheduled job).
"""

from __future__ import annotations

import sys
from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.test import RequestFactory
from django.utils import timezone

from guarded_tools.console import export


class _Scheduled:
    """Whom a scheduled export's list is built for when no ``--user`` is named: it may view
    every row (a job the site's operators set up). Recorded as nobody in the audit trail."""

    pk = None
    is_active = is_staff = is_superuser = is_authenticated = True
    is_anonymous = False

    def has_perm(self, perm: str, obj: Any = None) -> bool:
        return True

    def has_perms(self, perms: Any, obj: Any = None) -> bool:
        return True

    def has_module_perms(self, app_label: str) -> bool:
        return True

    def get_username(self) -> str:
        return "guarded_tools_export"


class Command(BaseCommand):
    help = "Export the audit trail, operations or confirmations (as the admin's lists filter"\
           " them) as CSV or JSON Lines."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("model", choices=sorted(export.kinds()),
                            help="What to export.")
        parser.add_argument("--filter", action="append", default=[], metavar="NAME=VALUE",
                            help="A filter of the admin's list, as in its query string"
                                 " (repeat for several).")
        parser.add_argument("--format", choices=sorted(export.FORMATS), default="jsonl")
        parser.add_argument("--output", default="-",
                            help="The file to write (strftime fields allowed); - for stdout.")
        parser.add_argument("--user", default="",
                            help="Export as this user (their permissions apply, and they are"
                                 " the actor in the audit trail).")

    def handle(self, *args: Any, **options: Any) -> None:
        kind = export.kinds()[options["model"]]
        model_admin = admin.site.get_model_admin(kind.model)
        query = "&".join(options["filter"])
        request = RequestFactory().get(f"/?{query}")
        request.user = self.person(options["user"])
        if not request.user.has_perm(export.EXPORT_PERMISSION):
            raise CommandError(f"{options['user']} may not export: they need the permission"
                               f" {export.EXPORT_PERMISSION}.")
        try:
            changelist = model_admin.get_changelist_instance(request)
        except Exception as exc:
            raise CommandError(f"The filters {query!r} are not the list's: {exc}") from exc
        entry = export.audited(request.user, kind, options["format"], query, "command")
        running = export.Export(kind, changelist.queryset, options["format"], entry)
        target = options["output"]
        if target == "-":
            for chunk in running.chunks():
                sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
        else:
            target = timezone.now().strftime(target)
            with open(target, "wb") as out:
                for chunk in running.chunks():
                    out.write(chunk)
            self.stderr.write(f"Exported {running.rows} rows of {kind.name} to {target}.")

    def person(self, username: str) -> Any:
        if not username:
            return _Scheduled()
        model = get_user_model()
        try:
            return model._default_manager.get_by_natural_key(username)
        except model.DoesNotExist as exc:
            raise CommandError(f"No user {username!r}.") from exc
