"""Provides the row every benchmarked call inserts: the tool's effect."""

from django.db import models


class Item(models.Model):
    """One effect: ``key`` is the caller's idempotency key, ``ref`` the stub's reference."""

    key = models.CharField(max_length=100, db_index=True)
    value = models.IntegerField(default=0)
    ref = models.CharField(max_length=64, blank=True)

    def __str__(self) -> str:
        return f"item {self.pk} [{self.key}]"
