"""The demo's order API: serializers and a ModelViewSet, as the site had them before agents."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework import permissions, serializers, viewsets

from project.demo.models import Order, OrderNote


class OrderSerializer(serializers.ModelSerializer):
    customer = serializers.HiddenField(default=serializers.CurrentUserDefault())

    class Meta:
        model = Order
        fields = ["id", "number", "status", "total", "customer"]
        extra_kwargs = {
            "number": {"help_text": "The order number, unique across the shop."},
            "status": {"help_text": "Where the order stands."},
            "total": {"help_text": "The order's total, in euros."},
            "id": {"help_text": "The order's id."},
        }


class OrderViewSet(viewsets.ModelViewSet):
    """Your orders."""

    serializer_class = OrderSerializer
    queryset = Order.objects.all()
    permission_classes = [permissions.IsAuthenticated, permissions.DjangoModelPermissions]

    def get_queryset(self) -> QuerySet[Order]:
        return Order.objects.filter(customer_id=self.request.user.pk).order_by("number")


class OrderNoteInput(serializers.Serializer):
    """What note_order takes: the order (one of yours) and the note."""

    operationId = serializers.CharField(
        max_length=255, label="Operation id", help_text="A new UUID per intended operation."
    )
    order = serializers.PrimaryKeyRelatedField(
        queryset=Order.objects.all(), help_text="The id of one of your orders."
    )
    text = serializers.CharField(max_length=500, label="Note", help_text="The note's text.")

    def validate_order(self, order: Order) -> Order:
        request: Any = self.context.get("request")
        if request is None or order.customer_id != request.user.pk:
            # The same answer as a missing order: others' orders are not disclosed.
            raise serializers.ValidationError("No such order.", code="does_not_exist")
        return order


class OrderNoteSerializer(serializers.ModelSerializer):
    class Meta:
        model = OrderNote
        fields = ["id", "order", "reference", "text", "created_at"]
        extra_kwargs = {
            "id": {"help_text": "The note's id."},
            "order": {"help_text": "The order's id."},
            "reference": {"help_text": "The operationId that wrote the note."},
            "text": {"help_text": "The note's text."},
            "created_at": {"help_text": "When the note was written."},
        }
