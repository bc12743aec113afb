"""JSON Schema keywords to the specification: ECMA-262 patterns, linear uniqueItems."""

from __future__ import annotations

import json
import time
import timeit
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from guarded_tools import guard, tool
from guarded_tools.core.errors import ValidationError
from guarded_tools.core.schema.validation import compile_schema, schema_names, validate
from guarded_tools.models import Confirmation, Operation, OperationState
from guarded_tools.store import fingerprint
from project.demo.models import Account, LedgerEntry, PaymentAuthorization
from tests.conftest import key

URL = "/agent/tools/{}/"
DIGITS = {"type": "string", "pattern": r"^\d{3}$"}
# Digits Python's \d takes and ECMA-262's does not, spelled out (they look like 1, 2, 3).
ARABIC_INDIC = "\u0661\u0662\u0663"
EXTENDED_ARABIC_INDIC = "\u06f1\u06f2\u06f3"
FULL_WIDTH = "\uff11\uff12\uff13"
THAI = "\u0e51\u0e52\u0e53"


def post(client: Any, name: str, body: Any) -> Any:
    return client.post(URL.format(name), body, format="json")


def with_field(field: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"operationId": {"type": "string"}, "value": field},
        "required": ["operationId", "value"],
        **extra,
    }


def keywords_of(response: Any) -> set[str]:
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_input"
    return {issue["keyword"] for issue in error["issues"]}


# -- ECMA-262 patterns, through HTTP ------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "value",
    [
        ARABIC_INDIC,
        EXTENDED_ARABIC_INDIC,
        FULL_WIDTH,
        THAI,
        "123\n",  # Python's $ also matches before a final newline
    ],
)
def test_a_digit_pattern_refuses_what_only_python_calls_digits(
    value: str, make_tool: Any, alice: Any, client_for: Any
) -> None:
    definition = make_tool(input_schema=with_field(DIGITS))
    response = post(client_for(alice), definition.name, {"operationId": key(), "value": value})
    assert keywords_of(response) == {"pattern"}


@pytest.mark.django_db
def test_a_digit_pattern_still_accepts_ascii_digits(
    make_tool: Any, alice: Any, client_for: Any
) -> None:
    definition = make_tool(input_schema=with_field(DIGITS))
    response = post(client_for(alice), definition.name, {"operationId": key(), "value": "123"})
    assert response.status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("pattern", "good", "bad"),
    [
        (r"^\p{Lu}\p{Ll}+$", "Émile", "émile"),  # Unicode property escapes (u flag)
        (r"^(?<year>\d{4})-\k<year>$", "2024-2024", "2024-2025"),  # JavaScript's named groups
        (r"^\w+$", "abc_9", "abcé"),  # \w is ASCII
        (r"^.$", "😀", "\r"),  # . is one code point, never a line terminator
    ],
)
def test_patterns_follow_ecma_262(
    pattern: str, good: str, bad: str, make_tool: Any, alice: Any, client_for: Any
) -> None:
    definition = make_tool(input_schema=with_field({"type": "string", "pattern": pattern}))
    client = client_for(alice)
    assert post(client, definition.name, {"operationId": key(), "value": good}).status_code == 200
    refused = post(client, definition.name, {"operationId": key(), "value": bad})
    assert keywords_of(refused) == {"pattern"}


@pytest.fixture
def payer(user_factory: Any) -> Any:
    return user_factory("payer", perms=("demo.add_ledgerentry",))


@pytest.mark.django_db
@pytest.mark.parametrize("amount", [
    "\u0e59\u0e59\u0e59.\u0e59\u0e59",  # Thai 999.99, which Decimal reads as 999.99
    f"{ARABIC_INDIC}.50",
    f"{FULL_WIDTH}.50",
    "10.50\n",
])
def test_send_payment_refuses_an_amount_in_non_ascii_digits(
    amount: str, payer: Any, client_for: Any
) -> None:
    """The demo's amount once reached a person as unreadable text and Decimal read it."""
    source = Account.objects.create(owner=payer, name="A", balance=Decimal("1000"))
    receiver = Account.objects.create(owner=payer, name="B", balance=Decimal("0"))
    auth = PaymentAuthorization.objects.create(source=source, source_version=0)
    body = {"operationId": key(), "sourceId": source.pk, "receiverId": receiver.pk,
            "amount": amount, "authorizationId": auth.pk}
    response = post(client_for(payer), "send_payment", body)
    assert keywords_of(response) == {"pattern"}
    assert response.json()["error"]["issues"][0]["path"] == ["amount"]
    assert not Confirmation.objects.exists() and not LedgerEntry.objects.exists()


@pytest.mark.django_db
def test_pattern_properties_and_the_keywords_that_depend_on_them_are_ecma_262(
    make_tool: Any, alice: Any, client_for: Any
) -> None:
    digits_only = {"patternProperties": {r"^\d+$": {"type": "integer"}}}
    closed = make_tool(input_schema={
        "type": "object", "properties": {"operationId": {"type": "string"}},
        **digits_only, "additionalProperties": False,
    })
    unevaluated = make_tool(input_schema={
        "type": "object", "properties": {"operationId": {"type": "string"}},
        "allOf": [digits_only], "unevaluatedProperties": False,
    })
    named = make_tool(input_schema={
        "type": "object", "propertyNames": {"pattern": r"^(operationId|\d+)$"},
    })
    client = client_for(alice)
    for definition in (closed, unevaluated, named):
        ok = post(client, definition.name, {"operationId": key(), "12": 1})
        assert ok.status_code == 200, (definition.name, ok.content)
    arabic = {"operationId": key(), ARABIC_INDIC: 1}
    assert keywords_of(post(client, closed.name, arabic)) == {"additionalProperties"}
    assert keywords_of(post(client, unevaluated.name, arabic)) == {"unevaluatedProperties"}
    # The name fails propertyNames' own pattern.
    assert keywords_of(post(client, named.name, {"operationId": key(), FULL_WIDTH: 1})) == {
        "pattern"}
    # A name matching patternProperties gets its subschema: "12" must be an integer.
    assert keywords_of(post(client, closed.name, {"operationId": key(), "12": "x"})) == {"type"}


@pytest.mark.django_db
def test_a_recursive_schema_that_names_its_dialect_keeps_ecma_patterns(
    make_tool: Any, alice: Any, client_for: Any
) -> None:
    definition = make_tool(input_schema={
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"operationId": {"type": "string"}, "code": DIGITS, "child": {"$ref": "#"}},
    })
    response = post(client_for(alice), definition.name,
                    {"operationId": key(), "child": {"code": ARABIC_INDIC}})
    assert keywords_of(response) == {"pattern"}


@pytest.mark.django_db
def test_format_regex_means_an_ecma_262_expression(
    make_tool: Any, alice: Any, client_for: Any
) -> None:
    definition = make_tool(input_schema=with_field({"type": "string", "format": "regex"}))
    client = client_for(alice)
    ok = post(client, definition.name, {"operationId": key(), "value": r"^(?<y>\d{4})$"})
    assert ok.status_code == 200
    python_only = post(client, definition.name, {"operationId": key(), "value": r"(?P<y>\d)"})
    assert keywords_of(python_only) == {"format"}


@pytest.mark.parametrize("pattern", [r"^(?P<y>\d{4})$", r"^\d+\Z", "[a-", r"(?i)abc"])
@pytest.mark.parametrize("where", ["input", "output", "property-names"])
def test_a_pattern_ecma_262_refuses_is_refused_at_registration(pattern: str, where: str) -> None:
    schemas: dict[str, dict[str, Any]] = {
        "input": {"input_schema": with_field({"type": "string", "pattern": pattern})},
        "output": {"output_schema": {"type": "object",
                                     "properties": {"x": {"type": "string", "pattern": pattern}}}},
        "property-names": {"input_schema": {"type": "object",
                                            "patternProperties": {pattern: {}}}},
    }
    with pytest.raises(ValueError) as info:
        tool(name=f"bad_pattern_{where}", idempotency_key="operationId", **schemas[where])(
            lambda input, ctx: {})
    message = str(info.value)
    assert "ECMA-262" in message and repr(pattern) in message
    assert "(?<name>...)" in message  # the hint says what to write instead


EXPONENTIAL = [
    r"^(a+)+$",
    r"^(\w+\s?)*$",  # words and spaces: the classic
    r"^(\d+(\.\d+)?)*$",
    r"^(?:[a-z]{1,5})+$",
    r"^(?<word>\p{L}+)*$",
    r"^(?=(a+)+b)",  # a lookahead backtracks too
    r"^(a+|b)+$",
]


@pytest.mark.parametrize("pattern", EXPONENTIAL)
@pytest.mark.parametrize("where", ["pattern", "patternProperties"])
def test_a_pattern_that_backtracks_exponentially_is_refused_at_registration(
    pattern: str, where: str
) -> None:
    schema: dict[str, Any] = (
        with_field({"type": "string", "pattern": pattern}) if where == "pattern"
        else {"type": "object", "patternProperties": {pattern: {}}}
    )
    with pytest.raises(ValueError) as info:
        tool(name="backtracks", idempotency_key="operationId", input_schema=schema)(
            lambda input, ctx: {})
    assert "exponential time" in str(info.value) and repr(pattern) in str(info.value)


@pytest.mark.parametrize(
    ("pattern", "near_miss"),
    [
        (r"^([a-z0-9]+\.)+[a-z]{2,}$", "ab." * 4000 + "!"),  # each repetition ends with a dot
        (r"^[a-z]+(-[a-z]+)*$", "ab-" * 4000 + "!"),
        (r"^(\d{3})+$", "123" * 4000 + "1"),  # a fixed width splits one way only
        (r"^(\d{1,3}\.){3}\d{1,3}$", "1.1.1." + "1" * 12000),  # the outer repeat is bounded
        (r"^(ab|cd)+$", "ab" * 6000 + "!"),
    ],
)
def test_repetitions_that_split_one_way_are_accepted_and_fast(
    pattern: str, near_miss: str
) -> None:
    schema = {"type": "string", "pattern": pattern}
    assert not valid(schema, near_miss)
    # ~12,000 characters: an exponential split would never finish, a linear one grows 4x.
    assert growth(schema, lambda n: near_miss[: n * 3] + near_miss[-1], small=1000) < 11


def test_a_python_caller_with_a_lone_surrogate_gets_invalid_input_not_a_crash() -> None:
    echo = guard(lambda input, ctx: input, read_only=True, input_schema=with_field(DIGITS))
    with pytest.raises(ValidationError) as info:
        echo({"operationId": "k", "value": "12\ud800"})
    assert [i["keyword"] for i in info.value.issues] == ["pattern"]


@pytest.mark.django_db
def test_reconciling_checks_the_output_pattern_as_ecma_262(
    make_tool: Any, user_factory: Any
) -> None:
    definition = make_tool(output_schema={
        "type": "object", "required": ["code"], "properties": {"code": DIGITS}})
    requester = user_factory("requester")
    k = key()
    operation = Operation.objects.create(
        tool=definition.name, scope=f"auth.user:{requester.pk}", key=k, user=requester,
        fingerprint=fingerprint({"operationId": k}), input={"operationId": k},
        state=OperationState.OUTCOME_UNKNOWN,
    )
    staff = user_factory("operator", is_staff=True, perms=(
        "guarded_tools.view_operation", "guarded_tools.reconcile_operation"))
    client = Client()
    client.force_login(staff)
    data = {"action": "mark_succeeded", ACTION_CHECKBOX_NAME: [operation.pk], "note": "checked",
            f"fence-{operation.pk}": operation.fence}
    bad = client.post("/admin/guarded_tools/operation/",
                      {**data, "output": json.dumps({"code": ARABIC_INDIC})})
    assert "output schema" in bad.content.decode()
    operation.refresh_from_db()
    assert operation.state == OperationState.OUTCOME_UNKNOWN
    client.post("/admin/guarded_tools/operation/", {**data, "output": '{"code": "123"}'})
    operation.refresh_from_db()
    assert operation.state == OperationState.SUCCEEDED and operation.output == {"code": "123"}


# -- uniqueItems: JSON equality, linear ---------------------------------------------------------

UNIQUE = {"type": "array", "uniqueItems": True}


def valid(schema: dict[str, Any], instance: Any) -> bool:
    try:
        validate(compile_schema(schema, name="t"), instance, known=schema_names(schema))
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize(
    ("items", "unique"),
    [
        ([1, 1.0], False),  # equal numbers
        ([True, 1], True),  # a boolean is not a number
        ([False, 0, None, "", [], {}], True),
        ([{"a": 1, "b": [1, {"c": 2}]}, {"b": [1.0, {"c": 2.0}], "a": 1}], False),
        ([{"a": [True]}, {"a": [1]}], True),
        ([[1, 2], [2, 1]], True),  # arrays are ordered
        (["1", 1], True),
        ([None, None], False),
        ([10**20, float(10**20)], False),
        ([2**53 + 1, float(2**53)], True),  # equal by value, not by float rounding
    ],
)
def test_unique_items_uses_json_schema_equality(items: list[Any], unique: bool) -> None:
    assert valid(UNIQUE, items) is unique
    assert valid(UNIQUE, list(reversed(items))) is unique


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from([0.0, 1.0, 2.5])
    | st.sampled_from(["", "a", "1"]),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.sampled_from(["a", "b"]), children, max_size=2),
    max_leaves=8,
)


@given(st.lists(JSON, max_size=6))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_unique_items_agrees_with_jsonschemas_own_answer(items: list[Any]) -> None:
    """jsonschema's quadratic comparison is the oracle on arrays small enough for it."""
    assert valid(UNIQUE, items) is Draft202012Validator(UNIQUE).is_valid(items)


@pytest.mark.django_db
def test_a_100_kb_array_of_objects_with_one_late_duplicate_is_answered(
    make_tool: Any, alice: Any, client_for: Any
) -> None:
    definition = make_tool(input_schema=with_field({
        "type": "array", "uniqueItems": True,
        "items": {"type": "object", "properties": {"id": {"type": "integer"}}}}))
    items = [{"id": i, "tag": "x"} for i in range(6000)]
    body = {"operationId": key(), "value": [*items, {"tag": "x", "id": 17}]}
    response = post(client_for(alice), definition.name, body)
    assert keywords_of(response) == {"uniqueItems"}


# -- work grows linearly with the request, keyword by keyword ----------------------------------


def seconds(run: Callable[[], Any]) -> float:
    """The best of five measurements of one call (each repeated to at least 50 ms), in this
    process's CPU time: what other processes on a loaded machine do stays out of it."""
    timer = timeit.Timer(run, timer=time.process_time)
    number = 1
    while timer.timeit(number) < 0.05:
        number *= 2
    return min(timer.repeat(repeat=5, number=number)) / number


def growth(schema: dict[str, Any], build: Callable[[int], Any], small: int = 2000) -> float:
    """How much longer validation takes when the instance is four times larger."""
    validator = compile_schema(schema, name="t")
    known = schema_names(schema)

    def run(instance: Any) -> Callable[[], None]:
        def call() -> None:
            try:
                validate(validator, instance, known=known)
            except ValidationError:
                pass
        return call

    return seconds(run(build(4 * small))) / seconds(run(build(small)))


STRING = {"type": "string"}
BIG_ENUM = [{"k": list(range(i, i + 300))} for i in range(0, 3000, 300)]
CASES: dict[str, tuple[dict[str, Any], Callable[[int], Any]]] = {
    "uniqueItems over objects": (
        {"type": "array", "uniqueItems": True},
        lambda n: [{"id": i, "tags": ["a", {"b": i}]} for i in range(n)],
    ),
    "uniqueItems over arrays": (
        {"type": "array", "uniqueItems": True},
        lambda n: [[i, [i, "x"]] for i in range(n)],
    ),
    "pattern over many strings": (
        {"type": "array", "items": {"type": "string", "pattern": r"^\d{1,9}(\.\d{1,2})?$"}},
        lambda n: ["123.45"] * n + [f"{THAI}.45"],
    ),
    "pattern on one long string": (
        {"type": "string", "pattern": r"^[a-z]+(-[a-z]+)*$"},
        lambda n: "ab-" * n + "!",
    ),
    "backtracking pattern bounded by maxLength": (
        {"type": "string", "maxLength": 64, "pattern": r"\d+$"},
        lambda n: "1" * n + "x",
    ),
    "patternProperties and additionalProperties": (
        {"type": "object", "patternProperties": {r"^k\d+$": STRING}, "additionalProperties": False},
        lambda n: {f"k{i}": "v" for i in range(n)},
    ),
    "unevaluatedProperties through allOf": (
        {"type": "object", "allOf": [{"patternProperties": {r"^k\d+$": STRING}}],
         "unevaluatedProperties": False},
        lambda n: {f"k{i}": "v" for i in range(n)},
    ),
    "enum of large values": (
        {"type": "array", "items": {"enum": BIG_ENUM}},
        lambda n: [BIG_ENUM[-1]] * (n // 20),
    ),
    "const with a large value": (
        {"type": "array", "items": {"const": BIG_ENUM}},
        lambda n: [BIG_ENUM] * (n // 200),
    ),
    "nested anyOf and oneOf": (
        {"type": "array", "items": {"anyOf": [
            {"oneOf": [{"type": "integer", "minimum": 10}, {"type": "integer", "maximum": 5}]},
            {"oneOf": [{"type": "string", "pattern": r"^\d+$"}, {"type": "string"}]},
            {"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
        ]}},
        lambda n: [12, 3, "x", {"a": 1}, {"b": 2}] * (n // 25),
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_validation_work_is_linear_in_the_instance(case: str) -> None:
    """Four times the instance may cost about four times the work, never sixteen.

    A ratio, not a duration: the machine's speed cancels out. Linear work measures 4 to 7
    here (a larger working set misses caches more); the bound leaves room for noise on a
    shared machine and still refuses quadratic growth (16).
    """
    schema, build = CASES[case]
    assert growth(schema, build) < 11
