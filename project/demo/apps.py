"""The demo app: a shop, a booking calendar and a payments ledger."""

from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "project.demo"
    label = "demo"
    verbose_name = "Demo shop"
    default_auto_field = "django.db.models.BigAutoField"
