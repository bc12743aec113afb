"""Provides a site's existing DRF viewsets and JSON views as guarded tools.

``guarded_viewset(OrderViewSet, basename="order", actions={...})`` registers one tool
per chosen action (``order_list``, ``order_create``...). Each call runs the real view:
its ``authentication_classes`` authenticate the agent's own credentials again (the
request's headers, and the session and user its middleware attached), then its
permissions, throttles, ``get_queryset()`` scoping and serializer validation apply as
they would to a direct call; the guard runs around it (key, claim, journal,
confirmation, verify, replay, repair plans).

Re-running the view's own authentication, rather than forcing the guard's user on it,
means the guard never lets a view accept a caller its classes would refuse (a view
that takes tokens only refuses a session caller through the guard as well).

Effects and the journal: before a keyed action runs, the guard writes a journal entry
naming the view. A 4xx answer is the view's refusal (DRF raises its ``APIException``
before the effect): the entry is removed and the claim released, so the repaired retry
with the same key runs. An exception, or a 5xx answer, keeps the entry: the outcome is
unknown, the view never runs again for that key, and a person reconciles it (or the
tool's ``recover``, given in the action's options, proves it). The view can read
the operation handle as ``request.guarded_operation`` to write its own entries.

The viewset's own route (``/api/orders/``) runs no guard, so by default the viewsets
published here refuse agent credentials there: :class:`guarded_tools.permissions.
RefuseAgentCredentials` goes first in their ``permission_classes`` (the guard's own
request passes it), unless ``refuse_agent_credentials=False``; check ``W013`` warns of a
published viewset whose route takes agent credentials without it.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlencode

from django.contrib import auth
from django.contrib.auth.models import AnonymousUser
from django.core.handlers.wsgi import WSGIRequest
from django.http import HttpRequest, HttpResponse
from django.utils.functional import SimpleLazyObject
from rest_framework import permissions, viewsets
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from guarded_tools.core.catalog import ErrorCatalog
from guarded_tools.core.definition import Tool
from guarded_tools.core.errors import AuthorizationError, NotAuthenticated, RateLimited
from guarded_tools.core.registry import ToolRegistry
from guarded_tools.core.registry import registry as default_registry
from guarded_tools.permissions import RefuseAgentCredentials, mark_guarded
from guarded_tools.tools.binding import InputRejected, field_title, issue
from guarded_tools.tools.sources.serializers import issues_from_errors, json_schema

logger = logging.getLogger("guarded_tools")

VIEW_ERRORS = ErrorCatalog(
    "guarded_tools.transports.rest.views",
    {
        # Nothing ran and the claim was released: the call with the right object's id
        # (the same idempotency key) runs, so the retry policy says what the fix says.
        "object_not_found": {
            "status": 404,
            "retry": "after_repair",
            "message": "The object does not exist, or you cannot see it.",
            "why": "The view found no object with that id among the objects it shows you;"
            " nothing ran.",
            "fix": "Call the list tool of the same kind to find the object's id, then call"
            " again with it.",
            "link": "#object_not_found",
            "repair": {"action": "change_input", "instruction": "Find the object's id with"
                       " the list tool of the same kind and call again with it."},
        },
        "view_refused": {
            "status": 409,
            "retry": "never",
            "message": "The view refused the call.",
            "why": "The site's own view answered with an error that has no code of its own.",
            "fix": "Stop and tell the user what you tried; do not retry as it is.",
            "link": "#view_refused",
        },
    },
)

#: Action: (HTTP method, detail, keyed, takes a body).
ACTIONS: dict[str, tuple[str, bool, bool, bool]] = {
    "list": ("get", False, False, False),
    "retrieve": ("get", True, False, False),
    "create": ("post", False, True, True),
    "update": ("put", True, True, True),
    "partial_update": ("patch", True, True, True),
    "destroy": ("delete", True, True, False),
}
KEY_FIELD = {"type": "string", "minLength": 1, "maxLength": 255, "title": "Operation id",
             "description": "A new UUID per intended operation; reuse it on every retry."}
#: The original request's attributes the view's authentication reads (what middleware
#: attached, and DRF's test client's forced credentials, as a direct call would carry).
#: They are read with ``getattr``, which a DRF ``Request`` answers from the request it wraps.
CARRIED = ("session", "_force_auth_user", "_force_auth_token", "_dont_enforce_csrf_checks")
_ABSENT = object()


def _lookup_schema(viewset: type[viewsets.GenericViewSet]) -> tuple[str, dict[str, Any]]:
    """The detail lookup's input name (``lookup_url_kwarg`` or ``lookup_field``) and type."""
    name = getattr(viewset, "lookup_url_kwarg", None) or viewset.lookup_field
    queryset = getattr(viewset, "queryset", None)
    field = None
    if queryset is not None:
        model = queryset.model
        field = model._meta.pk if viewset.lookup_field == "pk" else model._meta.get_field(
            viewset.lookup_field
        )
    kind = field.get_internal_type() if field is not None else ""
    if kind in ("AutoField", "BigAutoField", "SmallAutoField", "IntegerField",
                "BigIntegerField", "PositiveIntegerField", "PositiveBigIntegerField"):
        return name, {"type": "integer", "minimum": 1 if "Auto" in kind else -(2**63),
                      "title": "Id", "description": "The object's id, as the list tool shows."}
    schema: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": 255,
                              "title": field_title(name), "description": "The object's key."}
    if kind == "UUIDField":
        schema["format"] = "uuid"
    return name, schema


def _serializer_of(viewset: type[viewsets.GenericViewSet], action: str) -> Any:
    view = viewset(action=action, request=None, format_kwarg=None, kwargs={}, args=())
    return view.get_serializer_class()


def _hoist(schema: dict[str, Any], into: dict[str, Any]) -> dict[str, Any]:
    """``schema`` without its ``$defs``, which move to ``into`` (the new root's)."""
    schema = dict(schema)
    into.update(schema.pop("$defs", {}))
    return schema


def action_schemas(
    viewset: type[viewsets.GenericViewSet], action: str, key_field: str
) -> tuple[dict[str, Any], dict[str, Any], tuple[str, ...]]:
    """``(input schema, output schema, problems)`` of one action."""
    _method, detail, keyed, body = ACTIONS[action]
    defs: dict[str, Any] = {}
    problems: list[str] = []
    inputs: dict[str, Any] = {"type": "object", "properties": {}, "required": [],
                              "additionalProperties": False}
    serializer = _serializer_of(viewset, action) if action != "destroy" else None
    if body and serializer is not None:
        request, found = json_schema(serializer, "request")
        problems += found
        inputs = _hoist(request, defs)
        inputs.setdefault("properties", {})
        inputs["required"] = [] if action == "partial_update" else list(
            inputs.get("required", [])
        )
    lookup, lookup_schema = _lookup_schema(viewset)
    for name, sub in ((lookup, lookup_schema) if detail else (None, None),
                      (key_field, KEY_FIELD) if keyed else (None, None)):
        if name is None:
            continue
        if name in inputs["properties"]:
            raise ValueError(f"{viewset.__name__}.{action}: the serializer has a field named"
                             f" {name!r}, which the tool needs for its own input.")
        inputs["properties"][name] = sub
        inputs["required"].append(name)
    if not inputs["required"]:
        del inputs["required"]
    response: dict[str, Any] = {"type": "object", "properties": {}}
    if action == "destroy":
        response = {"type": "object", "required": ["deleted", lookup], "properties": {
            "deleted": {"type": "boolean"}, lookup: lookup_schema}}
    elif serializer is not None:
        item, found = json_schema(serializer, "response")
        problems += found
        item = _hoist(item, defs)
        if action == "list":
            response = {"type": "object", "required": ["results"],
                        "properties": {"results": {"type": "array", "items": item}}}
        else:
            response = item
    if defs:
        inputs["$defs"] = defs
        response = {**response, "$defs": defs}
    return inputs, response, tuple(problems)


def view_request(ctx: Any, method: str, body: Any, *, user: Any = None,
                 query: str = "") -> HttpRequest:
    """A request for the view: the agent's own headers and session, a new method and body.

    ``request.user`` is what Django's ``AuthenticationMiddleware`` would attach (the
    session's user), not the user DRF authenticated for the guard, so a DRF view's own
    ``authentication_classes`` decide again; a plain Django view, which has none, is
    given the guard's ``user``.
    """
    original = getattr(ctx, "request", None)  # Django's, or a DRF Request that wraps one
    payload = b"" if body is None else json.dumps(body).encode("utf-8")
    environ: dict[str, Any] = {}
    if isinstance(original, (HttpRequest, Request)):  # a Request reads through to its own
        environ.update({k: v for k, v in original.META.items() if isinstance(k, str)
                        and not k.startswith("wsgi.") and k not in ("CONTENT_TYPE",
                                                                    "CONTENT_LENGTH")})
        environ["wsgi.url_scheme"] = original.scheme
        environ["PATH_INFO"] = original.path_info
        environ.setdefault("SERVER_NAME", original.get_host().split(":")[0])
    environ.setdefault("SERVER_NAME", "localhost")
    environ.setdefault("SERVER_PORT", "80")
    environ.setdefault("PATH_INFO", "/")
    environ.setdefault("wsgi.url_scheme", "http")
    environ.update({
        "REQUEST_METHOD": method.upper(),
        "QUERY_STRING": query,
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(payload)),
        "wsgi.input": io.BytesIO(payload),
    })
    request = WSGIRequest(environ)
    if isinstance(original, (HttpRequest, Request)):
        for name in CARRIED:
            value = getattr(original, name, _ABSENT)
            if value is not _ABSENT:
                setattr(request, name, value)
    if user is not None:
        request.user = user
    elif hasattr(request, "session"):
        request.user = SimpleLazyObject(  # type: ignore[assignment]  # as the middleware does
            lambda: auth.get_user(request)
        )
    else:
        request.user = AnonymousUser()
    request.guarded_operation = getattr(ctx, "operation", None)  # type: ignore[attr-defined]
    mark_guarded(request)  # the view's own route refuses agent credentials; this call is ours
    return request


def response_data(response: HttpResponse) -> Any:
    """The view's answer as plain JSON (a DRF ``Response``'s data, or a JSON body)."""
    if isinstance(response, Response):
        if response.data is None:
            return None
        return json.loads(JSONRenderer().render(response.data))
    if not response.content:
        return None
    return json.loads(response.content)


def refusal(response: HttpResponse, data: Any, known: frozenset[str]) -> Exception:
    """The guard's error for the view's 4xx answer."""
    status = response.status_code
    if status in (400, 422):
        errors = data
        if isinstance(data, Mapping) and set(data) == {"detail"}:
            errors = {"non_field_errors": [data["detail"]]}
        issues = issues_from_errors(errors, known) if errors else []
        return InputRejected(issues or [issue([], "invalid", known)])
    if status == 401:
        return NotAuthenticated()
    if status == 403:
        return AuthorizationError()
    if status == 404:
        return VIEW_ERRORS.error("object_not_found")
    if status == 429:
        retry_after = response.get("Retry-After")
        return RateLimited(headers={"Retry-After": retry_after} if retry_after else None)
    return VIEW_ERRORS.error("view_refused")


class ViewFailed(Exception):
    """The view answered 5xx: its text stays here (the log), the agent gets a generic error."""


def view_handler(
    view: Callable[..., HttpResponse], *, method: str, url_kwargs: tuple[str, ...],
    key_field: str | None, name: str, keyed: bool, wrap_list: bool = False,
    guard_user: bool = False,
) -> Callable[[Mapping[str, Any], Any], Any]:
    """The handler that runs ``view`` once for a call, inside the guard.

    ``url_kwargs``: input fields passed as the view's URL keyword arguments (a detail
    action's lookup); the rest is the JSON body, or the query string of a GET.
    ``guard_user``: a plain Django view gets the guard's user as ``request.user``.
    """

    def handler(input: Mapping[str, Any], ctx: Any) -> Any:
        kwargs, fields = split_input(input, url_kwargs, key_field)
        body = fields if method in ("post", "put", "patch") else None
        query = "" if body is not None or not fields else urlencode(
            {k: v if isinstance(v, str) else json.dumps(v) for k, v in fields.items()}
        )
        operation = getattr(ctx, "operation", None)
        if keyed and operation is not None:  # the effect boundary: see the module's text
            operation.write({"view": name, "method": method.upper()})
        request = view_request(ctx, method, body, query=query,
                               user=getattr(ctx, "user", None) if guard_user else None)
        response = view(request, **kwargs)
        status = response.status_code
        if 200 <= status < 300:
            data = response_data(response)
            if method == "delete":
                return {"deleted": True, **{arg: input[arg] for arg in url_kwargs}}
            if wrap_list and isinstance(data, list):
                return {"results": data}
            return data if data is not None else {}
        if 400 <= status < 500:
            error = refusal(response, _safe_data(response), known(ctx))
            if keyed and operation is not None:
                operation.remove()  # refused before its effect: the key is fresh again
            raise error
        logger.error("view of tool %s answered %s: %s", name, status,
                     getattr(response, "data", None) or response.content[:2000])
        raise ViewFailed(f"the view of tool {name} answered {status}")

    handler.__name__ = name
    return handler


def split_input(input: Mapping[str, Any], url_kwargs: tuple[str, ...],
                key_field: str | None) -> tuple[dict[str, str], dict[str, Any]]:
    """``(the view's URL keyword arguments, the rest of the input)``, without the key."""
    fields = dict(input)
    kwargs = {arg: str(fields.pop(arg)) for arg in url_kwargs if arg in fields}
    if key_field is not None:
        fields.pop(key_field, None)
    return kwargs, fields


def view_check(
    viewset: type[viewsets.GenericViewSet], *, action: str, method: str,
    url_kwargs: tuple[str, ...], key_field: str | None,
) -> Callable[[Mapping[str, Any], Any], None]:
    """``Tool.input_check`` for a create, update or destroy action: the view, unsaved.

    The view is set up as for the call (the agent's request, its authentication and
    permission classes, ``get_object()`` for an update, so ``get_queryset()`` scopes it
    and a ``unique`` validator leaves the object itself out) and its serializer validates
    the input; nothing is saved, no throttle counts it. A destroy stops after
    ``get_object()``: nobody is asked to delete what the agent cannot see. Its refusals
    are the view's, as the call's would be: ``invalid_input`` with paths,
    ``object_not_found``...
    """
    detail = ACTIONS[action][1]

    def check(input: Mapping[str, Any], ctx: Any) -> None:
        kwargs, fields = split_input(input, url_kwargs, key_field)
        view = viewset(action_map={method: action})
        original = view_request(ctx, method, fields)
        view.setup(original, **kwargs)
        request = view.initialize_request(original, **kwargs)
        view.request = request
        view.format_kwarg = None
        try:
            view.perform_authentication(request)
            view.check_permissions(request)
            instance = view.get_object() if detail else None
            if action == "destroy":
                return
            serializer = view.get_serializer(instance, data=fields,
                                             partial=action == "partial_update")
            valid = serializer.is_valid()
        except Exception as exc:  # the view's own answer; an unknown exception propagates
            response = view.handle_exception(exc)
            raise refusal(response, _safe_data(response), known(ctx)) from None
        if not valid:
            issues = issues_from_errors(serializer.errors, known(ctx))
            raise InputRejected(issues or [issue([], "invalid", known(ctx))])

    return check


def _safe_data(response: HttpResponse) -> Any:
    """The refusal's data; a DRF ``Response``'s as it is, its ``ErrorDetail`` codes kept."""
    if isinstance(response, Response):
        return response.data
    try:
        return response_data(response)
    except (ValueError, TypeError):
        return None


def known(ctx: Any) -> frozenset[str]:
    definition = getattr(ctx, "tool", None)
    return definition.schema_names if definition is not None else frozenset()


def model_permissions(viewset: type[viewsets.GenericViewSet], method: str) -> tuple[str, ...]:
    """The Django permissions the view's ``DjangoModelPermissions`` requires for ``method``.

    As the tool's own ``permissions`` they are checked on every call, replays included
    (the view's classes run only when the view does), and ``tools/`` lists the tool only
    to users who hold them.
    """
    queryset = getattr(viewset, "queryset", None)
    if queryset is None:
        return ()
    required: list[str] = []
    for cls in viewset.permission_classes:
        if isinstance(cls, type) and issubclass(cls, permissions.DjangoModelPermissions):
            for perm in cls().get_required_permissions(method.upper(), queryset.model):
                if perm not in required:
                    required.append(perm)
    return tuple(required)


def refuse_agents(viewset: type[viewsets.GenericViewSet]) -> None:
    """Put ``RefuseAgentCredentials`` first in ``viewset``'s permission classes (once).

    The class itself changes, so the site's own route to it (its router's) refuses agent
    credentials too; the guard's own request passes.
    """
    if RefuseAgentCredentials not in viewset.permission_classes:
        viewset.permission_classes = [RefuseAgentCredentials, *viewset.permission_classes]


def guarded_viewset(
    viewset: type[viewsets.GenericViewSet],
    *,
    actions: Mapping[str, Mapping[str, Any]],
    basename: str | None = None,
    key_field: str = "operationId",
    registry: ToolRegistry | None = None,
    refuse_agent_credentials: bool = True,
    **common: Any,
) -> dict[str, Tool]:
    """Register the chosen ``actions`` of ``viewset`` as guarded tools; return them by action.

    ``actions`` maps an action (``list``, ``retrieve``, ``create``, ``update``,
    ``partial_update``, ``destroy``) to that tool's options (``confirm``,
    ``permissions``, ``recover``, ``description``...); ``common`` applies to all.
    ``list`` and ``retrieve`` are read-only; the others are keyed by ``key_field``.
    ``refuse_agent_credentials``: the viewset's own route refuses agent credentials
    (:mod:`guarded_tools.permissions`); False leaves its permission classes as they are.
    """
    target = registry if registry is not None else default_registry
    if refuse_agent_credentials:
        refuse_agents(viewset)
    base = basename or viewset.__name__.removesuffix("ViewSet").lower()
    lookup, _schema = _lookup_schema(viewset)
    made: dict[str, Tool] = {}
    for action, options in actions.items():
        if action not in ACTIONS:
            raise ValueError(f"{viewset.__name__}: unknown action {action!r}; publish one of"
                             f" {', '.join(ACTIONS)}.")
        method, detail, keyed, _body = ACTIONS[action]
        inputs, outputs, problems = action_schemas(viewset, action, key_field)
        name = options.get("name") or f"{base}_{action}"
        view = viewset.as_view({method: action})
        spec: dict[str, Any] = {**common, **options}
        spec.pop("name", None)
        doc = (viewset.__doc__ or "").strip().splitlines()
        spec.setdefault("description", f"{action.replace('_', ' ').capitalize()}:"
                        f" {doc[0] if doc else base}")
        spec.setdefault("read_only", not keyed)
        spec.setdefault("module", viewset.__module__)  # not view_handler's, this library's
        if "permissions" not in spec:
            spec["permissions"] = model_permissions(viewset, method)
        if spec.get("journal") is False:
            raise ValueError(f"{name}: a published view's journal holds its effect boundary;"
                             " it cannot be turned off.")
        if keyed:
            spec.setdefault("idempotency_key", key_field)
            spec.setdefault("destructive", action in ("destroy", "update"))
        if action in ("create", "update", "partial_update", "destroy"):
            spec["input_check"] = view_check(
                viewset, action=action, method=method, url_kwargs=(lookup,) if detail else (),
                key_field=key_field)
        definition = Tool.build(
            name=name,
            handler=view_handler(view, method=method, url_kwargs=(lookup,) if detail else (),
                                 key_field=key_field if keyed else None, name=name,
                                 keyed=keyed, wrap_list=action == "list"),
            input_schema=inputs,
            output_schema=outputs,
            schema_problems=problems,
            published_action=(viewset, action),  # check W013
            **spec,
        )
        made[action] = target.register(definition)
    return made


def guarded_view(
    view: Callable[..., HttpResponse],
    *,
    name: str,
    input_schema: Mapping[str, Any],
    method: str = "post",
    url_kwargs: tuple[str, ...] = (),
    key_field: str = "operationId",
    registry: ToolRegistry | None = None,
    **options: Any,
) -> Tool:
    """Register a plain Django view that answers JSON (a function, or ``View.as_view()``).

    The input's ``url_kwargs`` fields become the view's URL keyword arguments, the rest
    its JSON body (its query string for ``get``). Such a view has no authentication of
    its own: ``request.user`` is the user the guard authenticated. ``get`` views are
    read-only unless ``read_only=False``; the others are keyed by ``key_field``, which
    ``input_schema`` must declare. Errors and the journal are as for viewsets.
    """
    method = method.lower()
    target = registry if registry is not None else default_registry
    options.setdefault("read_only", method == "get")
    options.setdefault("module", getattr(view, "__module__", ""))  # as_view() keeps its class's
    keyed = not options["read_only"]
    if keyed:
        options.setdefault("idempotency_key", key_field)
    if options.get("journal") is False:
        raise ValueError(f"{name}: a published view's journal holds its effect boundary;"
                         " it cannot be turned off.")
    definition = Tool.build(
        name=name,
        handler=view_handler(view, method=method, url_kwargs=tuple(url_kwargs),
                             key_field=key_field if keyed else None, name=name, keyed=keyed,
                             guard_user=True),
        input_schema=input_schema,
        description=options.pop("description", None) or (view.__doc__ or "").strip(),
        **options,
    )
    return target.register(definition)
