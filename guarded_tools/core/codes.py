"""Provides the guard's own error codes: status, retry policy, why, fix and link for each.

``guarded_tools.core.errors`` raises them; the catalog exports them for agents
(``GET errors.json``, ``llms.txt``) from these same entries.
"""

from __future__ import annotations

from guarded_tools.core.catalog import ErrorCatalog


class GuardCatalog(ErrorCatalog):
    """The guard's own codes, raised by its error classes and never as a ``ToolError``.

    They may declare the statuses the guard's decisions need that an application's
    error may not: 202 (a confirmation is pending) and 500 (the outcome is not known).
    """

    statuses = frozenset(range(200, 600))


BUILTIN = GuardCatalog(
    "guarded_tools",
    {
        "invalid_input": {
            "status": 422,
            "retry": "after_repair",
            "message": "The input does not match the tool's input schema.",
            "why": "The guard validates every call against the tool's JSON Schema, then"
            " against its serializer's or model's own validation where it has one, before"
            " anything runs; nothing was executed and the idempotency key was not used.",
            "fix": "Correct the fields listed in `issues` (read the tool's inputSchema from"
            " {tool_list}) and call again; keep your idempotency key unless a listed field"
            " holds it.",
            "link": "#invalid_input",
            "keyless": {
                "why": "The guard validates every call against the tool's JSON Schema, then"
                " against its serializer's or model's own validation where it has one, before"
                " anything runs; nothing was executed.",
                "fix": "Correct the fields listed in `issues` (read the tool's inputSchema"
                " from {tool_list}) and call again.",
            },
        },
        "malformed_request": {
            "status": 400,
            "retry": "after_repair",
            "message": "The request body is not a single valid JSON object.",
            "why": "The body could not be parsed as strict JSON: it is not UTF-8, nests too"
            " deep, repeats a member name, uses NaN or Infinity, or is not an object.",
            "fix": "Send one JSON object encoded as UTF-8 with Content-Type application/json.",
            "link": "#malformed_request",
        },
        "method_not_allowed": {
            "status": 405,
            "retry": "after_repair",
            "message": "This endpoint does not accept that HTTP method.",
            "why": "Each endpoint answers only its own methods, listed in the response's Allow"
            " header; nothing ran.",
            "fix": "Use a method the Allow header lists: POST calls a tool and carries MCP"
            " messages; GET reads the tool list, an operation's status and the catalog.",
            "link": "#method_not_allowed",
        },
        "request_too_large": {
            "status": 413,
            "retry": "after_repair",
            "message": "The request body is larger than this site accepts.",
            "why": "Bodies over the configured limit are refused before they are read whole.",
            "fix": "Send a smaller input. If you split the work into several calls, give"
            " each call its own new idempotency key: one key sent with different inputs is"
            " refused as idempotency_key_reused.",
            "link": "#request_too_large",
            "keyless": {"fix": "Send a smaller input, or split the work into several smaller"
                        " calls."},
        },
        "idempotency_key_missing": {
            "status": 400,
            "retry": "after_repair",
            "message": "This tool needs an idempotency key and none was sent.",
            "why": "Tools with an effect run at most once per key; without a key a retry"
            " could run the effect twice.",
            "fix": "Generate one unique key per intended operation (a UUID), send it in"
            " {key_place}, and reuse it for every retry.",
            "link": "#idempotency_key_missing",
        },
        "idempotency_key_invalid": {
            "status": 400,
            "retry": "after_repair",
            "message": "The idempotency key is empty, too long or has control characters.",
            "why": "Keys are 1 to {max_key_length} printable characters; this one was"
            " refused before anything ran, so it can never be used.",
            "fix": "Generate a new key (a UUID) and send it instead of the refused one, in"
            " {key_place}; reuse the new key for every retry.",
            "link": "#idempotency_key_invalid",
        },
        "idempotency_key_reused": {
            "status": 422,
            "retry": "never",
            "message": "This idempotency key was already used with a different input.",
            "why": "A key names one intended operation; the same key with another input"
            " would be a different operation.",
            "fix": "Resend the original input unchanged to get its result, or use a new key"
            " for a new operation.",
            "link": "#idempotency_key_reused",
        },
        "operation_in_flight": {
            "status": 409,
            "retry": "as_is",
            "message": "This operation is still running.",
            "why": "Another call with the same key holds the claim; the handler runs only once.",
            "fix": "Wait the Retry-After seconds, then repeat the identical call with the"
            " same key.",
            "link": "#operation_in_flight",
        },
        "not_authenticated": {
            "status": 401,
            "retry": "after_repair",
            "message": "This request needs authentication.",
            "why": "The request carried no valid credentials for this site.",
            "fix": "Send the credentials your host was configured with (for example an"
            " Authorization: Token header) and repeat the request.",
            "link": "#not_authenticated",
        },
        "authorization_denied": {
            "status": 403,
            "retry": "never",
            "message": "You are not allowed to do this.",
            "why": "The authenticated principal lacks a permission or an object-level rule"
            " refused it. Permissions are checked again on every call, replays included.",
            "fix": "Stop and ask the user to have a site administrator grant the permission.",
            "link": "#authorization_denied",
        },
        "csrf_failed": {
            "status": 403,
            "retry": "after_repair",
            "message": "The CSRF check failed.",
            "why": "A call authenticated by a session cookie must carry the CSRF token this"
            " site issued, and come from one of its own pages; this one did not. Nothing ran"
            " and the idempotency key was not used.",
            "fix": "Send this site's CSRF token (the {csrf_cookie} cookie's value) in the"
            " {csrf_header} header and repeat the request unchanged.{keep_key}",
            "link": "#csrf_failed",
            "keyless": {
                "why": "A request authenticated by a session cookie must carry the CSRF token"
                " this site issued, and come from one of its own pages; this one did not."
                " Nothing ran.",
            },
        },
        "confirmation_required": {
            "status": 202,
            "retry": "after_repair",
            "message": "A person must approve this call before it runs.",
            "why": "This tool asks a staff member to approve each call in the site's admin;"
            " nothing has run yet.",
            "fix": "Wait for a person's approval (ask again after the Retry-After seconds),"
            " then repeat the identical call.{keep_key}",
            "link": "#confirmation_required",
        },
        "confirmation_declined": {
            "status": 409,
            "retry": "never",
            "message": "The call was declined.",
            "why": "The confirmation step refused this operation; nothing ran.",
            "fix": "Tell the user it was declined and ask what to do instead.",
            "link": "#confirmation_declined",
        },
        "confirmation_expired": {
            "status": 409,
            "retry": "never",
            "message": "Nobody approved the call in time, or its approval was not used in time.",
            "why": "Pending confirmations, and approvals no call used, expire after a fixed"
            " time; nothing ran.",
            "fix": "Ask the user whether the operation is still wanted; if so, call again"
            " with a new idempotency key.",
            "link": "#confirmation_expired",
            "keyless": {"fix": "Ask the user whether the operation is still wanted; if so, call"
                        " again, which asks a person again."},
        },
        "tool_not_found": {
            "status": 404,
            "retry": "never",
            "message": "No tool with that name is available to you.",
            "why": "The name is misspelled, or the tool is not offered to this principal.",
            "fix": "List the tools with {tool_list} and use a listed name.",
            "link": "#tool_not_found",
        },
        "operation_not_found": {
            "status": 404,
            "retry": "never",
            "message": "No such operation.",
            "why": "Operations are visible only to the principal that started them.",
            "fix": "Use the operation id returned by your own call.",
            "link": "#operation_not_found",
        },
        "confirmation_not_found": {
            "status": 404,
            "retry": "never",
            "message": "No such confirmation.",
            "why": "Confirmations are visible only to the principal whose call asked for them.",
            "fix": "Use the Location a pending call of your own answered with.",
            "link": "#confirmation_not_found",
        },
        "verification_failed": {
            "status": 502,
            "retry": "never",
            "message": "The operation ran but its result could not be verified.",
            "why": "The tool's verifier did not confirm the intended result, so the outcome"
            " is uncertain.",
            "fix": "Do not retry with a new key; ask the user to check the result or have"
            " a person reconcile the operation.",
            "link": "#verification_failed",
            "keyless": {"fix": "Do not call the tool again for this request; ask the user to"
                        " check the result."},
        },
        "outcome_unknown": {
            "status": 500,
            "retry": "never",
            "message": "The operation may or may not have taken effect.",
            "why": "The handler failed after its effect boundary and recovery could not prove"
            " success or non-execution; retrying could do it twice.",
            "fix": "Do not retry with a new key. Tell the user a person must reconcile this"
            " operation; its id is in `operation`.",
            "link": "#outcome_unknown",
        },
        "operation_failed": {
            "status": 409,
            "retry": "never",
            "message": "A person recorded that this operation failed.",
            "why": "The outcome was reconciled by a person, who marked the operation failed;"
            " every replay answers that decision.",
            "fix": "Do not retry it with a new key; tell the user it failed and ask what to do"
            " instead.",
            "link": "#operation_failed",
        },
        "rate_limited": {
            "status": 429,
            "retry": "as_is",
            "message": "Too many calls.",
            "why": "The site's throttle, or the tool's rate limit (so many calls per window"
            " for each caller), refused this call before it ran. Every answer of a tool"
            " with budgets says what is left: over REST the RateLimit field (`r`: calls"
            " left, `t`: seconds until the window frees; RateLimit-Policy gives `q` calls"
            " per `w` seconds) and `meta.budgets`; over MCP"
            " `_meta[\"io.github.guarded-tools/budgets\"]` (`calls.remaining`, `resets_in`).",
            "fix": "Wait the Retry-After seconds, then repeat the call; before the next calls,"
            " read `t` or `resets_in` and keep under `r` or `calls.remaining`.",
            "link": "#rate_limited",
        },
        "budget_exceeded": {
            "status": 429,
            "retry": "after_repair",
            "message": "This call would exceed the caller's budget.",
            "why": "The tool's policy limits how much each caller may spend per window; the"
            " check and the reservation are one step with the claim, and nothing ran. Every"
            " answer of the tool says what is left of the sum: `meta.budgets[].sum.remaining`"
            " and `frees_at` in a REST body, the same under"
            " `_meta[\"io.github.guarded-tools/budgets\"]` over MCP.",
            "fix": "Wait until `budget.frees_at`, lower the amount to at most"
            " `budget.remaining`, or ask the user.",
            "link": "#budget_exceeded",
        },
        "internal_error": {
            "status": 500,
            "retry": "never",
            "message": "The server failed while handling this call.",
            "why": "An unexpected error occurred; its details are in the server log under"
            " the correlation id.",
            "fix": "Stop and report the correlation id to the site's operators.",
            "link": "#internal_error",
        },
    },
)
