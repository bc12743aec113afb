# shop/tools.py: the site's tools. guarded_tools imports the tools.py of every installed
# app at start-up; agents see these tools at /agent/tools/ and over MCP.
from django.contrib.auth import get_user_model

from guarded_tools import tool


@tool(
    description="List the site's user accounts and whether each is active.",
    input_schema={"type": "object", "properties": {}, "additionalProperties": False},
    read_only=True,  # a plain read: no idempotency key, no approval
)
def list_users(input, ctx):
    users = get_user_model().objects.order_by("username")[:50]
    return {"users": [{"username": u.username, "active": u.is_active} for u in users]}


@tool(
    description="Deactivate a user account. A staff member approves each call in the admin.",
    input_schema={
        "type": "object",
        "properties": {
            "operationId": {"type": "string", "minLength": 1, "maxLength": 100},
            "username": {"type": "string", "minLength": 1, "maxLength": 150},
        },
        "required": ["operationId", "username"],
        "additionalProperties": False,
    },
    idempotency_key="operationId",  # the agent's key: a retry with it never runs twice
    confirm="effect-only",  # a person approves the call before it runs; replays need no one
    summary="Deactivate the account {username}",  # what the approver reads
    atomic=True,  # the effect and the call's record commit in one transaction
)
def deactivate_user(input, ctx):
    changed = get_user_model().objects.filter(username=input["username"]).update(is_active=False)
    return {"username": input["username"], "deactivated": changed == 1}
