"""Provides the app config of the matrix's UUID-keyed user model."""

from django.apps import AppConfig


class UuidUsersConfig(AppConfig):
    name = "tests.matrix.uuid_users"
    label = "uuid_users"
    default_auto_field = "django.db.models.BigAutoField"
