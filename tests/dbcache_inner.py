"""What tests/integration/test_dbcache.py runs in a pytest of its own (not collected by the suite).

Each test needs the database, in a group of its own, so that two workers set one up each.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command


def migrated_and_seeded() -> None:
    # migrate --check: exits non-zero while a migration is unapplied
    call_command("migrate", check_unapplied=True, verbosity=0)
    assert ContentType.objects.filter(app_label="guarded_tools").exists()
    assert Permission.objects.filter(codename="add_operation").exists()


@pytest.mark.django_db
@pytest.mark.xdist_group("one")
def test_one() -> None:
    migrated_and_seeded()


@pytest.mark.django_db
@pytest.mark.xdist_group("two")
def test_two() -> None:
    migrated_and_seeded()
