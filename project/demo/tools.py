"""The demo site's agent tools: one per feature of guarded_tools."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, Literal

from django.db import transaction
from django.db.models import F, Q
from pydantic import Field

from guarded_tools import Approvers, Budget, GuardedTool, Policy, Rule, Run, ToolError, tool
from guarded_tools.catalog import ErrorCatalog
from guarded_tools.viewsets import guarded_viewset
from project.demo import effects
from project.demo.api import OrderNoteInput, OrderNoteSerializer, OrderViewSet
from project.demo.models import (
    Account,
    LedgerEntry,
    Order,
    OrderNote,
    PaymentAuthorization,
    Slot,
)

DEMO_ERRORS = ErrorCatalog(
    "demo",
    {
        "order_already_shipped": {
            "status": 409,
            "retry": "never",
            "message": "Shipped orders cannot be cancelled.",
            "why": "The order left the warehouse; cancelling is no longer possible here.",
            "fix": "Stop and tell the user to request a return instead.",
            "link": "#order_already_shipped",
        },
        "slot_stale": {
            "status": 409,
            "retry": "after_repair",
            "message": "The selected slot is no longer available.",
            "why": "Someone booked the slot after you listed it.",
            "fix": "Call list_available_slots, choose a current slot, and retry with the same"
            " operationId.",
            "link": "#slot_stale",
        },
        "payment_source_stale": {
            "status": 409,
            "retry": "after_repair",
            "message": "The source account changed after the payment was authorized.",
            "why": "The authorization is bound to the account's state when it was prepared.",
            "fix": "Refresh the accounts, prepare a new authorization, and retry the payment"
            " with the same operationId, amount and receiverId.",
            "link": "#payment_source_stale",
        },
        "receiver_not_found": {
            "status": 422,
            "retry": "after_repair",
            "message": "The receiving account does not exist.",
            "why": "receiverId names no account.",
            "fix": "Ask the user which account to pay, then retry with its id and the same"
            " operationId.",
            "link": "#receiver_not_found",
        },
        "insufficient_funds": {
            "status": 409,
            "retry": "never",
            "message": "The source account cannot cover this amount.",
            "why": "The balance is lower than the amount.",
            "fix": "Stop and ask the user to choose a smaller amount or another account.",
            "link": "#insufficient_funds",
        },
    },
)

OPERATION_ID = {"type": "string", "minLength": 1, "maxLength": 255,
                "title": "Operation id", "description": "A new UUID per intended operation."}
#: The fields of a transfer between accounts (send_payment, move_between_my_accounts).
TRANSFER = {
    "operationId": OPERATION_ID,
    "sourceId": {"type": "integer", "minimum": 1, "title": "From account"},
    "receiverId": {"type": "integer", "minimum": 1, "title": "To account"},
    "amount": {"type": "string", "pattern": r"^\d{1,9}(\.\d{1,2})?$", "title": "Amount"},
}
PAYMENT_OUTPUT = {
    "type": "object",
    "properties": {
        "paymentId": {"type": "integer"},
        "amount": {"type": "string"},
        "receiverId": {"type": "integer"},
    },
    "required": ["paymentId", "amount", "receiverId"],
}


def _owns_source(*, input: dict[str, Any], user: Any, **_: Any) -> bool:
    return Account.objects.filter(pk=input["sourceId"], owner=user).exists()


def _order_of(user: Any, order_id: int) -> Order | None:
    return Order.objects.filter(pk=order_id, customer=user).first()


@tool(
    name="list_orders",
    description="List your orders with their status.",
    input_schema={"type": "object", "properties": {}, "additionalProperties": False},
    output_schema={
        "type": "object",
        "properties": {"orders": {"type": "array", "items": {"type": "object"}}},
        "required": ["orders"],
    },
    read_only=True,
)
def list_orders(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    orders = Order.objects.filter(customer=ctx.user).order_by("number")
    return {
        "orders": [
            {"id": o.pk, "number": o.number, "status": o.status, "total": str(o.total)}
            for o in orders
        ]
    }


@tool(
    name="cancel_order",
    description="Cancel one of your orders that has not shipped.",
    input_schema={
        "type": "object",
        "properties": {
            "operationId": OPERATION_ID,
            "orderId": {"type": "integer", "minimum": 1, "title": "Order"},
        },
        "required": ["operationId", "orderId"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {"orderId": {"type": "integer"}, "status": {"type": "string"}},
        "required": ["orderId", "status"],
    },
    permissions=["demo.change_order"],
    authorize=lambda input, user, **_: _order_of(user, input["orderId"]) is not None,
    idempotency_key="operationId",
    atomic=True,
)
def cancel_order(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    order = Order.objects.select_for_update().get(pk=input["orderId"])
    if order.status == Order.Status.SHIPPED:
        raise DEMO_ERRORS.error("order_already_shipped", details={"order": order.pk})
    order.status = Order.Status.CANCELLED
    order.save(update_fields=["status"])
    return {"orderId": order.pk, "status": order.status}


def recover_note(*, operation: Any, scope: str, **_: Any) -> dict[str, Any]:
    """A note of this operation is proof; none, with the write fenced, proves no note.

    The operationId is the agent's choice, and another user may have chosen it too:
    only a note written in this principal's scope is this operation's.
    """
    note = OrderNote.objects.filter(scope=scope, reference=operation.key).first()
    if note is not None:
        return {"recovered": True, "output": {"noteId": note.pk, "orderId": note.order_id}}
    operation.remove()
    return {"recovered": False}


@tool(
    name="add_order_note",
    description="Add a note to one of your orders (for example a delivery instruction).",
    input_schema={
        "type": "object",
        "properties": {
            "operationId": OPERATION_ID,
            "orderId": {"type": "integer", "minimum": 1, "title": "Order"},
            "text": {"type": "string", "minLength": 1, "maxLength": 500, "title": "Note"},
        },
        "required": ["operationId", "orderId", "text"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {"noteId": {"type": "integer"}, "orderId": {"type": "integer"}},
        "required": ["noteId", "orderId"],
    },
    authorize=lambda input, user, **_: _order_of(user, input["orderId"]) is not None,
    idempotency_key="operationId",
    recover=recover_note,
)
def add_order_note(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    ctx.operation.write({"phase": "noting"})
    effects.before_effect(input["operationId"])
    with transaction.atomic():
        ctx.operation.write({"phase": "noted"})  # fenced: a stale owner rolls back
        note = OrderNote.objects.create(
            order_id=input["orderId"], scope=ctx.operation.scope, reference=ctx.operation.key,
            text=input["text"],
        )
    effects.after_effect(input["operationId"])
    return {"noteId": note.pk, "orderId": note.order_id}


@tool(
    name="list_available_slots",
    description="List the bookable slots that are still free.",
    input_schema={"type": "object", "properties": {}, "additionalProperties": False},
    read_only=True,
)
def list_available_slots(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    slots = Slot.objects.filter(booked_by__isnull=True).order_by("starts_at")
    return {
        "slots": [
            {"id": s.pk, "resource": s.resource, "startsAt": s.starts_at.isoformat()}
            for s in slots
        ]
    }


@tool(
    name="book_slot",
    description="Book a free slot. If it was taken meanwhile, list the slots again.",
    input_schema={
        "type": "object",
        "properties": {
            "operationId": OPERATION_ID,
            "slotId": {"type": "integer", "minimum": 1, "title": "Slot"},
        },
        "required": ["operationId", "slotId"],
        "additionalProperties": False,
    },
    idempotency_key="operationId",
    atomic=True,
)
def book_slot(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    taken = Slot.objects.filter(pk=input["slotId"], booked_by__isnull=True).update(
        booked_by=ctx.user
    )
    if not taken:
        raise ToolError(
            "slot_stale",
            "The selected slot is no longer available.",
            retry="after_repair",
            repair={
                "action": "call_tool",
                "tool": "list_available_slots",
                "instruction": "Choose a current slot, then retry with the same operationId.",
            },
            why=DEMO_ERRORS["slot_stale"].why,
            fix=DEMO_ERRORS["slot_stale"].fix,
            link=DEMO_ERRORS["slot_stale"].link,
        )
    return {"slotId": input["slotId"], "booked": True}


@tool(
    name="list_payment_accounts",
    description="List your accounts with balances and their current version.",
    input_schema={"type": "object", "properties": {}, "additionalProperties": False},
    read_only=True,
)
def list_payment_accounts(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {
        "accounts": [
            {"id": a.pk, "name": a.name, "balance": str(a.balance), "version": a.version}
            for a in Account.objects.filter(owner=ctx.user).order_by("pk")
        ]
    }


@tool(
    name="prepare_payment_authorization",
    description="Authorize a payment from one of your accounts in its current state.",
    input_schema={
        "type": "object",
        "properties": {
            "requestId": {**OPERATION_ID, "title": "Request id"},
            "sourceId": {"type": "integer", "minimum": 1, "title": "Source account"},
        },
        "required": ["requestId", "sourceId"],
        "additionalProperties": False,
    },
    authorize=_owns_source,
    idempotency_key="requestId",
    atomic=True,
)
def prepare_payment_authorization(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    account = Account.objects.get(pk=input["sourceId"])
    auth = PaymentAuthorization.objects.create(source=account, source_version=account.version)
    return {"authorizationId": auth.pk}


def _payment_output(entry: LedgerEntry) -> dict[str, Any]:
    return {"paymentId": entry.pk, "amount": str(entry.amount), "receiverId": entry.receiver_id}


def recover_payment(*, operation: Any, scope: str, **_: Any) -> dict[str, Any]:
    """The ledger is the authority: this operation's row means the payment happened.

    A row is this operation's by principal scope *and* key: the operationId is the
    agent's choice, and another user's payment may carry the same one.
    The transfer commits together with a journal write, which is a compare-and-set on
    the operation's fence: once recovery has taken the operation over, a stalled
    owner can never commit the transfer. So no ledger row proves no payment, and
    recovery clears the journal, which lets the guard release the key.
    """
    entry = LedgerEntry.objects.filter(scope=scope, reference=operation.key).first()
    if entry is not None:
        return {"recovered": True, "output": _payment_output(entry)}
    operation.remove()
    return {"recovered": False}


def payment_evidence(*, reference: str, operation: Any, **_: Any) -> tuple[str, str]:
    """Where a payment's journal reference lives: its ledger entry (with its admin page),
    or the word that there is none (the operator's page shows it beside the entry)."""
    from django.urls import NoReverseMatch, reverse

    entry = LedgerEntry.objects.filter(scope=operation.scope, reference=reference).first()
    if entry is None:
        return ("no ledger entry with this reference", "")
    try:
        url = reverse("admin:demo_ledgerentry_change", args=[entry.pk])
    except NoReverseMatch:
        url = ""
    return (f"ledger entry #{entry.pk}", url)


def verify_payment(*, input: dict[str, Any], output: Any, scope: str, **_: Any) -> bool:
    """The payment answered is this principal's, for this operation, of this amount."""
    payment = output.get("paymentId") if isinstance(output, dict) else None
    return isinstance(payment, int) and LedgerEntry.objects.filter(
        pk=payment, scope=scope, reference=input["operationId"], amount=Decimal(input["amount"])
    ).exists()


#: The demo's accounts hold euros: every amount a person reads carries it.
CURRENCY = "EUR"


def _money(amount: Decimal) -> str:
    return f"{amount:,.2f} {CURRENCY}"


def _grouped(value: Any) -> str:
    """An input's amount as the balances read ("1,500.00"); as typed if it is no number."""
    try:
        return f"{Decimal(str(value)):,.2f}"
    except (ArithmeticError, ValueError):
        return str(value)


def _amount_text(value: Any) -> str:
    return f"{_grouped(value)} {CURRENCY}"


def _account_text(account: Account | None, *, balance: bool = False) -> str:
    if account is None:
        return "an account that does not exist"
    text = f"{account.owner}'s {account.name}"
    return f"{text} (balance {_money(account.balance)})" if balance else text


def _account_url(account: Account | None, user: Any) -> str:
    """The account's admin page, for a person who may open it (staff with view_account)."""
    from django.urls import NoReverseMatch, reverse

    if account is None or not (getattr(user, "is_staff", False)
                               and user.has_perm("demo.view_account")):
        return ""
    try:
        return reverse("admin:demo_account_change", args=[account.pk])
    except NoReverseMatch:
        return ""


def present_payment(*, input: dict[str, Any], user: Any, **_: Any) -> dict[str, Any]:
    """The payment in one sentence, with the accounts' names, owners and balance."""
    ids = [input.get("sourceId"), input.get("receiverId")]
    accounts = Account.objects.select_related("owner").in_bulk(
        [i for i in ids if isinstance(i, int)])
    source, receiver = accounts.get(ids[0]), accounts.get(ids[1])  # type: ignore[arg-type]
    amount = input.get("amount", "?")
    return {
        "summary": f"Pay {_amount_text(amount)} from {_account_text(source, balance=True)}"
                   f" to {_account_text(receiver)}",
        "fields": {
            "amount": {"text": _grouped(input.get("amount", "?")), "unit": CURRENCY},
            "sourceId": (_account_text(source, balance=True), _account_url(source, user)),
            "receiverId": (_account_text(receiver), _account_url(receiver, user)),
        },
    }


def precheck_balance(*, input: dict[str, Any], **_: Any) -> None:
    """Before anyone is asked: the source's balance covers the amount."""
    source = Account.objects.filter(pk=input["sourceId"]).first()
    if source is None or source.balance < Decimal(input["amount"]):
        raise DEMO_ERRORS.error("insufficient_funds")


def _stale_authorization(input: dict[str, Any], source: Account | None) -> bool:
    """No authorization of this source in its current state (a payment since changed it)."""
    auth = PaymentAuthorization.objects.filter(
        pk=input["authorizationId"], source_id=input["sourceId"]).first()
    return source is None or auth is None or auth.source_version != source.version


def _source_stale() -> ToolError:
    """payment_source_stale with its plan: refresh, authorize again, retry the same key."""
    return DEMO_ERRORS.error(
        "payment_source_stale",
        repair={
            "steps": [
                {"action": "call_tool", "tool": "list_payment_accounts",
                 "instruction": "Refresh the source account state."},
                {"action": "call_tool", "tool": "prepare_payment_authorization",
                 "instruction": "Create a replacement authorization."},
                {"action": "retry_same_operation", "tool": "send_payment",
                 "instruction": "Retry with the replacement authorization."},
            ],
            "preserve": ["operationId", "amount", "receiverId"],
            "update": ["authorizationId"],
        },
    )


def precheck_payment(*, input: dict[str, Any], **_: Any) -> None:
    """Before anyone approves it: the receiver exists, the authorization is of the
    source as it is now, and the balance covers the amount.

    The handler checks the authorization again (a payment may run between the approval
    and the retry); this check only spares a person approving a call that would fail.
    """
    if not Account.objects.filter(pk=input["receiverId"]).exists():
        raise DEMO_ERRORS.error("receiver_not_found", repair={
            "action": "ask_user", "instruction": "Ask the user which account to pay."})
    if _stale_authorization(input, Account.objects.filter(pk=input["sourceId"]).first()):
        raise _source_stale()
    precheck_balance(input=input)


def _amount(input: dict[str, Any]) -> Decimal:
    return Decimal(str(input["amount"]))


#: The demo's rules (docs: approval policies): small payments run at once,
#: large ones need one approver, very large ones two, each user at most 2,000.00 a day
#: (above it, two approvers) and 10 payments a minute. Approvers may grant allowances
#: (standing approvals) for repeated payments: one approver for those bounded to 1,000.00 a
#: payment, two above. The people who manage budgets are emailed when a user's day reaches
#: 50 %, 80 % and 100 % of it (docs/howto/budgets-and-audit.md).
PAYMENT_POLICY = Policy(version="1", rules=[
    Rule(name="up to 50.00", when=lambda input, **kw: _amount(input) <= 50, outcome=Run(),
         description="Payments up to 50.00 run at once"),
    Rule(name="up to 1,000.00", when=lambda input, **kw: _amount(input) <= 1000,
         outcome=Approvers(1, allowances=True), description="up to 1,000.00 need one approver"),
    Rule(name="above 1,000.00", outcome=Approvers(2, allowances=True),
         description="more need two approvers"),
], budgets=[
    Budget(name="send_payment per day", window_seconds=86_400, sum_field="amount",
           limit=2000, escalate=Approvers(2), alerts=(50, 80, 100),
           description="above 2,000.00 a day per user, two approvers"),
    Budget(name="send_payment per minute", window_seconds=60, count=10, alerts=(),
           description="at most 10 payments a minute"),
])


class LedgerHooks:
    """What both money tools ask the ledger: recover a payment, link its entry, verify it."""

    def recover(self, **kwargs: Any) -> dict[str, Any]:
        return recover_payment(**kwargs)

    def evidence(self, **kwargs: Any) -> tuple[str, str]:
        return payment_evidence(**kwargs)

    def verify(self, **kwargs: Any) -> bool:
        return verify_payment(**kwargs)


class SendPayment(LedgerHooks, GuardedTool):
    """The class form of a tool (``@tool`` builds the same definition): options as class
    attributes, the handler as ``run`` and every hook as a method."""

    name = "send_payment"
    description = ("Send money from one of your accounts to another account. Payments up to"
                   " 50.00 run at once; larger ones wait for approval.")
    input = {
        "type": "object",
        "properties": {
            **TRANSFER,
            "authorizationId": {"type": "integer", "minimum": 1, "title": "Authorization"},
        },
        "required": ["operationId", "sourceId", "receiverId", "amount", "authorizationId"],
        "additionalProperties": False,
    }
    output = PAYMENT_OUTPUT
    permissions = ("demo.add_ledgerentry",)
    idempotency_key = "operationId"
    confirm = PAYMENT_POLICY
    intent = ("operationId", "sourceId", "receiverId", "amount")
    journal = True
    verify_timeout = None

    def run(self, input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        effects.after_claim(input["operationId"])
        source = Account.objects.get(pk=input["sourceId"])
        if _stale_authorization(input, source):
            raise _source_stale()
        return _transfer(input, ctx, source)

    def authorize(self, **kwargs: Any) -> bool:
        return _owns_source(**kwargs)

    def precheck(self, **kwargs: Any) -> None:
        precheck_payment(**kwargs)

    def present(self, **kwargs: Any) -> dict[str, Any]:
        return present_payment(**kwargs)



def _transfer(input: dict[str, Any], ctx: Any, source: Account) -> dict[str, Any]:
    """Move ``amount`` from ``source`` to ``receiverId``, journaled, as one ledger row."""
    amount = Decimal(input["amount"])
    if source.balance < amount:
        raise DEMO_ERRORS.error("insufficient_funds")
    receiver = Account.objects.get(pk=input["receiverId"])
    ctx.operation.write({"phase": "transferring", "reference": input["operationId"]})
    effects.before_effect(input["operationId"])
    with transaction.atomic():
        # Fenced: if another process took the operation over, this raises and the
        # transfer rolls back, so a stalled owner can never pay twice.
        ctx.operation.write({"phase": "transferred", "reference": input["operationId"]})
        entry = LedgerEntry.objects.create(
            scope=ctx.operation.scope, reference=ctx.operation.key,
            source=source, receiver=receiver, amount=amount,
        )
        Account.objects.filter(pk=source.pk).update(
            balance=F("balance") - amount, version=F("version") + 1
        )
        Account.objects.filter(pk=receiver.pk).update(balance=F("balance") + amount)
    effects.after_effect(input["operationId"])
    return _payment_output(entry)


# -- consent by the user themself (confirm="owner") ----------------------------------------
def _owns_both(*, input: dict[str, Any], user: Any, **_: Any) -> bool:
    source, receiver = input["sourceId"], input["receiverId"]
    # Exact lookups (not pk__in): an id past the column's range then matches nothing.
    return source != receiver and Account.objects.filter(
        Q(pk=source) | Q(pk=receiver), owner=user).count() == 2


def _own_account_text(account: Account | None, user: Any) -> str:
    if account is None or account.owner_id != getattr(user, "pk", None):
        return _account_text(account, balance=True)
    return f"your {account.name} (balance {_money(account.balance)})"


def present_move(*, input: dict[str, Any], user: Any, **_: Any) -> dict[str, Any]:
    """The move in one sentence, as its owner reads it on the consent page ("your …")."""
    ids = [input.get("sourceId"), input.get("receiverId")]
    accounts = Account.objects.select_related("owner").in_bulk(
        [i for i in ids if isinstance(i, int)])
    source, receiver = accounts.get(ids[0]), accounts.get(ids[1])  # type: ignore[arg-type]
    return {
        "summary": f"Move {_amount_text(input.get('amount', '?'))} from"
                   f" {_own_account_text(source, user)} to {_own_account_text(receiver, user)}",
        "fields": {
            "amount": {"text": _grouped(input.get("amount", "?")), "unit": CURRENCY},
            "sourceId": (_own_account_text(source, user), _account_url(source, user)),
            "receiverId": (_own_account_text(receiver, user), _account_url(receiver, user)),
        },
    }


class MoveBetweenMyAccounts(LedgerHooks, GuardedTool):
    """Consent by the account's owner (``confirm="owner"``), as a class-based tool."""

    name = "move_between_my_accounts"
    description = ("Move money between two of your own accounts. You approve each move"
                   " yourself, signed in to the site.")
    input = {
        "type": "object",
        "properties": {
            **TRANSFER,
        },
        "required": ["operationId", "sourceId", "receiverId", "amount"],
        "additionalProperties": False,
    }
    output = PAYMENT_OUTPUT
    idempotency_key = "operationId"
    confirm = "owner"
    journal = True
    verify_timeout = None

    def run(self, input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return _transfer(input, ctx, Account.objects.get(pk=input["sourceId"]))

    def authorize(self, **kwargs: Any) -> bool:
        return _owns_both(**kwargs)

    def precheck(self, **kwargs: Any) -> None:
        precheck_balance(**kwargs)

    def present(self, **kwargs: Any) -> dict[str, Any]:
        return present_move(**kwargs)



# -- the site's own building blocks as tools ---------------------------------------------


@tool(
    name="note_order",
    description="Add a note to one of your orders; the note is returned as the API shows it.",
    input=OrderNoteInput,
    output=OrderNoteSerializer,
    idempotency_key="operationId",
)
def note_order(data: dict[str, Any], ctx: Any) -> OrderNote:
    """The serializer form: the handler gets ``validated_data`` and returns a model."""
    ctx.operation.write({"phase": "noting"})
    return OrderNote.objects.create(
        order=data["order"], reference=data["operationId"], text=data["text"]
    )


@tool(name="count_orders", read_only=True)
def count_orders(
    status: Annotated[
        Literal["open", "shipped", "cancelled"] | None,
        Field(description="Count only orders with this status; all orders when null."),
    ] = None,
    *,
    ctx: Any,
) -> dict[str, Any]:
    """Count your orders, optionally only those with one status."""
    orders = Order.objects.filter(customer=ctx.user)
    if status is not None:
        orders = orders.filter(status=status)
    return {"count": orders.count()}


ORDER_TOOLS = guarded_viewset(
    OrderViewSet,
    basename="order",
    actions={
        "list": {},
        "retrieve": {},
        "create": {},
        "destroy": {"confirm": "effect-only"},  # a person approves it in the admin
    },
)
