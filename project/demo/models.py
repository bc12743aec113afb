"""Demo domain models: orders, bookable slots, accounts and a payments ledger."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Order(models.Model):
    class Status(models.TextChoices):
        OPEN = "open"
        SHIPPED = "shipped"
        CANCELLED = "cancelled"

    number = models.CharField(max_length=20, unique=True)
    customer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.OPEN)
    total = models.DecimalField(max_digits=10, decimal_places=2)

    def __str__(self) -> str:
        return self.number


class OrderNote(models.Model):
    """A note on an order, keyed by the operation that wrote it: ``scope`` + ``reference``.

    Not unique on purpose: a double execution would show up as two rows instead of
    being hidden by a constraint.
    """

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="notes")
    scope = models.CharField(
        max_length=200, default="",
        help_text="The principal scope of the operation that wrote it (its key is unique there).",
    )
    reference = models.CharField(max_length=255, help_text="The operation's key (operationId).")
    text = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["scope", "reference"], name="demo_note_operation")]

    def __str__(self) -> str:
        return self.reference


class Slot(models.Model):
    starts_at = models.DateTimeField()
    resource = models.CharField(max_length=60)
    booked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )

    def __str__(self) -> str:
        return f"{self.resource} at {self.starts_at:%Y-%m-%d %H:%M}"


class Account(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    name = models.CharField(max_length=60)
    balance = models.DecimalField(max_digits=12, decimal_places=2, default=0)
    version = models.PositiveIntegerField(default=1)

    def __str__(self) -> str:
        return self.name


class PaymentAuthorization(models.Model):
    source = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="+")
    source_version = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"authorization #{self.pk} of {self.source_id}"


class LedgerEntry(models.Model):
    """One transfer, keyed by its operation: ``scope`` + ``reference``. recover reads it.

    The operationId alone is the agent's choice, and two users may choose the same one:
    it names a payment only within its principal's scope.
    """

    scope = models.CharField(
        max_length=200, default="",
        help_text="The principal scope of the payment's operation (its key is unique there).",
    )
    reference = models.CharField(max_length=255, help_text="The operation's key (operationId).")
    source = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="+")
    receiver = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="+")
    amount = models.DecimalField(max_digits=12, decimal_places=2)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "ledger entries"
        constraints = [
            models.UniqueConstraint(fields=["scope", "reference"], name="demo_ledger_operation"),
        ]

    def __str__(self) -> str:
        return self.reference
