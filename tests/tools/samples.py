"""Sample tools of each kind the tool sources derive: Pydantic, serializers, viewsets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal

from django.http import HttpRequest, JsonResponse
from pydantic import BaseModel, Field, field_validator
from rest_framework.authentication import SessionAuthentication

from guarded_tools import registry
from guarded_tools.viewsets import guarded_view, guarded_viewset
from project.demo.api import OrderViewSet
from project.demo.models import Order


class Refund(BaseModel):
    operationId: str = Field(min_length=1, description="A new UUID per refund.")
    amount: int = Field(gt=0, le=500, description="Euro cents.")
    reason: Literal["damaged", "late"] | None = None

    @field_validator("amount")
    @classmethod
    def even(cls, value: int) -> int:
        if value % 2:
            raise ValueError(f"odd amounts like {value} are refused")  # quotes the input
        return value


class Receipt(BaseModel):
    refunded: int
    reason: str | None


def make_refund_tool(make_tool: Any) -> Any:
    """``(tool, inputs seen by its handler)``: a refund with a model in and a model out."""
    seen: list[Any] = []

    def handler(refund: Refund, ctx: Any) -> Receipt:
        seen.append(refund)
        return Receipt(refunded=refund.amount, reason=refund.reason)

    return make_tool(handler, input=Refund, output=Receipt, input_schema={"type": "object"}), seen


def order_of(user: Any, number: str = "A-1") -> Order:
    return Order.objects.create(number=number, customer=user, total="10.00")


PERMS = ("demo.add_order", "demo.delete_order")


class SessionOnlyViewSet(OrderViewSet):
    """Orders for browser sessions only."""

    authentication_classes = [SessionAuthentication]


def rename_order(request: HttpRequest, pk: str) -> JsonResponse:
    """Rename one of your orders (a plain Django view that answers JSON)."""
    data = json.loads(request.body)
    order = Order.objects.filter(pk=pk, customer=request.user).first()
    if order is None:
        return JsonResponse({"detail": "No such order."}, status=404)
    if Order.objects.filter(number=data["number"]).exists():
        return JsonResponse({"number": ["That number is taken."]}, status=400)
    order.number = data["number"]
    order.save(update_fields=["number"])
    return JsonResponse({"id": order.pk, "number": order.number})


RENAME_SCHEMA = {
    "type": "object",
    "properties": {
        "operationId": {"type": "string", "minLength": 1, "description": "A new UUID."},
        "pk": {"type": "integer", "minimum": 1, "description": "The order."},
        "number": {"type": "string", "minLength": 1, "maxLength": 20, "description": "New."},
    },
    "required": ["operationId", "pk", "number"],
    "additionalProperties": False,
}


def publish() -> Iterator[None]:
    """A session-only viewset's list and a plain view, registered while the caller runs."""
    made = list(guarded_viewset(SessionOnlyViewSet, basename="sessiononly",
                                actions={"list": {}}).values())
    made.append(guarded_view(rename_order, name="rename_order", input_schema=RENAME_SCHEMA,
                             url_kwargs=("pk",)))
    yield
    for definition in made:
        registry.unregister(definition.name)


class Flaky:
    """Counts the view's runs; the first ``failures`` runs raise after the effect."""

    def __init__(self) -> None:
        self.runs = 0
        self.failures = 0


FLAKY = Flaky()


class FlakyOrderViewSet(OrderViewSet):
    """Orders whose creation may fail after it saved the order."""

    def perform_create(self, serializer: Any) -> None:
        FLAKY.runs += 1
        super().perform_create(serializer)
        if FLAKY.runs <= FLAKY.failures:
            raise RuntimeError("postgres://secret-host/after-the-effect")


def publish_atomic(**options: Any) -> Iterator[Flaky]:
    """``FlakyOrderViewSet``'s create published with ``atomic=True``, while the caller runs."""
    global FLAKY
    FLAKY = Flaky()
    made = guarded_viewset(FlakyOrderViewSet, basename="atomic",
                           actions={"create": {"atomic": True, **options}})
    yield FLAKY
    for definition in made.values():
        registry.unregister(definition.name)
