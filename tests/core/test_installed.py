"""``guarded_tools.conf.installed``: Django's ``apps.is_installed``, asked once per name and
forgotten when ``INSTALLED_APPS`` changes."""

from __future__ import annotations

from django.apps import apps
from django.test import modify_settings

from guarded_tools.conf import installed

APP = "django.contrib.humanize"  # not in the test site's INSTALLED_APPS


def test_installed_answers_as_django_and_follows_installed_apps() -> None:
    assert installed("guarded_tools") is apps.is_installed("guarded_tools") is True
    assert installed(APP) is apps.is_installed(APP) is False
    with modify_settings(INSTALLED_APPS={"append": [APP]}):
        assert installed(APP) is apps.is_installed(APP) is True
    assert installed(APP) is apps.is_installed(APP) is False
    with modify_settings(INSTALLED_APPS={"remove": ["guarded_tools"]}):
        assert installed("guarded_tools") is False
    assert installed("guarded_tools") is True
