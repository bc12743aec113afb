"""Provides the app config: autodiscovers ``tools`` modules and registers checks."""

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class GuardedToolsConfig(AppConfig):
    name = "guarded_tools"
    label = "guarded_tools"
    verbose_name = _("Guarded tools")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from guarded_tools import checks  # noqa: F401 - registers the system checks
        from guarded_tools.tools.registry import autodiscover

        autodiscover()
        import logging

        from django.apps import apps

        from guarded_tools.transports.rest.exception_handler import LoggedOnce

        logger = logging.getLogger("django.request")  # the guard's 5xx answers, logged once
        if not any(isinstance(f, LoggedOnce) for f in logger.filters):
            logger.addFilter(LoggedOnce())

        if apps.is_installed("oauth2_provider"):
            # Its tokens' scopes, checked on every call by the authorization stage, and the
            # grant a waiting call was requested with, re-checked when its approval runs.
            from guarded_tools.contrib.oauth import OAuthCredentials
            from guarded_tools.core import credentials

            credentials.register(OAuthCredentials(), first=True)
