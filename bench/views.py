"""Provides the unguarded views: A (plain DRF), E (django-idempotency-key), the realistic plain.

Each does exactly what the matching guarded tool's handler does, so the difference
between them is the guard.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import JsonResponse
from django.utils.decorators import decorator_from_middleware
from idempotency_key.decorators import idempotency_key
from idempotency_key.middleware import ExemptIdempotencyKeyMiddleware
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bench import stub
from bench.floor import floor_call, floor_claimed_call, floor_replay
from bench.models import Item
from guarded_tools.pipeline import principal_scope


def insert(data: Any, ref: str = "") -> dict[str, Any]:
    """The effect every configuration performs: one INSERT."""
    item = Item.objects.create(key=str(data.get("operationId", "")),
                               value=int(data.get("value", 0)), ref=ref)
    return {"id": item.pk, "value": item.value}


class PlainInsertView(APIView):
    """A: a plain DRF view doing the tool's effect, with no guard."""

    def post(self, request: Request) -> Response:
        return Response(insert(request.data))


class PlainRemoteView(APIView):
    """The realistic handler, unguarded: a 5 ms call to the stub service, then the INSERT."""

    def post(self, request: Request) -> Response:
        ref = stub.call(settings.BENCH_STUB_URL, str(request.data.get("operationId", "")))
        return Response(insert(request.data, ref))


def _with_idempotency_key(cache_name: str) -> Any:
    """View A behind django-idempotency-key, opted in per view (no global middleware)."""
    view = idempotency_key(cache_name=cache_name)(PlainInsertView.as_view())
    return decorator_from_middleware(ExemptIdempotencyKeyMiddleware)(view)


#: E: the package with its cache storage on Django's database cache (shared, durable).
idempotent_db = _with_idempotency_key("idempotency")
#: E-mem: the same on Django's local-memory cache (per process: a lower bound only).
idempotent_mem = _with_idempotency_key("default")


def ping(request: Any) -> JsonResponse:
    return JsonResponse({"ok": True})


class FloorInsertView(APIView):
    """F, the floor: A's effect with the statements a guarded fresh call sends, no guard
    (:func:`bench.floor.floor_call`)."""

    def post(self, request: Request) -> Response:
        data, user = request.data, request.user
        return Response(floor_call(tool="floor", scope=principal_scope(user, None),
                                   key=str(data["operationId"]), user=user, input=data,
                                   effect=lambda: insert(data)))


class FloorRemoteView(APIView):
    """F-R, R-guarded's floor: the realistic handler between the claim and the completion
    the guard sends, no guard (:func:`bench.floor.floor_claimed_call`; PostgreSQL)."""

    def post(self, request: Request) -> Response:
        data, user = request.data, request.user
        key = str(data["operationId"])

        def effect() -> dict[str, Any]:
            return insert(data, stub.call(settings.BENCH_STUB_URL, key))

        return Response(floor_claimed_call(tool="floor-remote", scope=principal_scope(user, None),
                                           key=key, user=user, input=data, effect=effect))


class FloorReplayView(APIView):
    """F-C, C's floor: a replay of A's answer from this process's memory, no guard
    (:func:`bench.floor.floor_replay`)."""

    def post(self, request: Request) -> Response:
        data = request.data
        return Response(floor_replay(user=request.user, key=str(data["operationId"]),
                                     effect=lambda: insert(data)))


class FloorFullView(APIView):
    """F-D, D's floor: F with D's permission (the site's ``has_perms``, as the guard asks
    it) and D's journal entry, no guard (:func:`bench.floor.floor_call`)."""

    def post(self, request: Request) -> Response:
        data, user = request.data, request.user
        if not user.has_perms(("bench.add_item",)):
            return Response({"error": "permission"}, status=403)
        return Response(floor_call(tool="floor-full", scope=principal_scope(user, None),
                                   key=str(data["operationId"]), user=user, input=data,
                                   effect=lambda: insert(data), journal=[{"step": "insert"}]))
