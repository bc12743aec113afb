"""The error catalog: defined once, raised from, exported as JSON and llms.txt."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guarded_tools.catalog import (
    CatalogEntry,
    ErrorCatalog,
    catalogs,
    export_json,
    export_llms_txt,
)
from guarded_tools.core.catalog import resolve_link
from guarded_tools.core.codes import BUILTIN
from guarded_tools.core.errors import ToolError
from guarded_tools.core.repair import Repair, RepairPlan

SLOT = {
    "status": 409,
    "retry": "after_repair",
    "message": "The selected slot is no longer available.",
    "why": "Someone booked the slot after you listed it.",
    "fix": "Call list_available_slots, choose a current slot, and retry with the same"
    " operationId.",
    "link": "#slot_stale",
    "repair": {"action": "call_tool", "tool": "list_available_slots"},
}
SHIPPED = {
    "status": 409,
    "retry": "never",
    "message": "Shipped orders cannot be cancelled.",
    "why": "The order left the warehouse.",
    "fix": "Stop and tell the user to request a return instead.",
    "link": "#order_already_shipped",
}


def _code() -> str:
    return f"c_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def codes() -> tuple[str, str]:
    return _code(), _code()


# -- define and raise -----------------------------------------------------------------------------


def test_error_raises_the_defined_entry(make_catalog: Callable[..., ErrorCatalog],
                                        codes: tuple[str, str]) -> None:
    slot, shipped = codes
    shop = make_catalog({slot: SLOT, shipped: SHIPPED})
    error = shop.error(slot, details={"slotId": "secret-slot-77"})
    assert isinstance(error, ToolError)
    assert error.code == slot
    assert error.status_code == 409
    assert error.retry == "after_repair"
    assert error.raw_message == SLOT["message"]
    assert error.repair == Repair(action="call_tool", tool="list_available_slots")
    assert error.details == {"slotId": "secret-slot-77"}
    data = error.as_dict("https://docs.example/errors")
    assert data["why"] == SLOT["why"]
    assert data["fix"] == SLOT["fix"]
    assert data["link"] == "https://docs.example/errors#slot_stale"
    assert "secret-slot-77" not in json.dumps(data)
    with pytest.raises(ToolError) as info:
        raise shop.error(shipped)
    assert info.value.retry == "never"
    assert f"[{shipped}]" in str(info.value)


def test_error_overrides_message_retry_and_repair(make_catalog: Callable[..., ErrorCatalog],
                                                  codes: tuple[str, str]) -> None:
    slot, _ = codes
    shop = make_catalog({slot: SLOT})
    plan = {"steps": [{"action": "refresh_state"}, {"action": "ask_user"}]}
    error = shop.error(slot, "Slot 4 is gone.", retry="never", repair=plan)
    assert error.raw_message == "Slot 4 is gone."
    assert error.retry == "never"
    assert isinstance(error.repair, RepairPlan)
    assert error.as_dict()["why"] == SLOT["why"]


def test_unknown_code_is_a_key_error(make_catalog: Callable[..., ErrorCatalog]) -> None:
    with pytest.raises(KeyError):
        make_catalog({}).error("nope")


def test_entries_are_iterable_in_definition_order(make_catalog: Callable[..., ErrorCatalog],
                                                  codes: tuple[str, str]) -> None:
    first, second = codes
    shop = make_catalog({second: SHIPPED, first: SLOT})
    assert [e.code for e in shop] == [second, first]
    assert shop[first].why == SLOT["why"]
    assert catalogs.lookup(first) is shop[first]


def test_defaults_status_409_and_retry_never(make_catalog: Callable[..., ErrorCatalog],
                                             codes: tuple[str, str]) -> None:
    code, _ = codes
    entry = make_catalog({code: {"message": "m", "why": "w", "fix": "f"}})[code]
    assert (entry.status, entry.retry, entry.link, entry.repair) == (409, "never", "", None)


def test_a_repair_is_checked_where_it_is_defined(make_catalog: Callable[..., ErrorCatalog],
                                                 codes: tuple[str, str]) -> None:
    code, other = codes
    entry = make_catalog({code: SLOT})[code]
    assert isinstance(entry.repair, Repair)
    with pytest.raises(ValueError, match="Unknown repair action"):
        make_catalog({other: {**SLOT, "repair": {"action": "call_tools", "tool": "x"}}})
    assert catalogs.lookup(other) is None


# -- refusals -------------------------------------------------------------------------------------


def test_a_duplicate_code_in_one_catalog_is_refused(make_catalog: Callable[..., ErrorCatalog],
                                                    codes: tuple[str, str]) -> None:
    code, _ = codes
    shop = make_catalog({code: SLOT})
    with pytest.raises(ValueError, match="already defined"):
        shop.add(code, **SHIPPED)
    assert shop[code].message == SLOT["message"]


def test_a_code_defined_in_another_catalog_is_refused(make_catalog: Callable[..., ErrorCatalog],
                                                      codes: tuple[str, str]) -> None:
    code, fresh = codes
    first = make_catalog({code: SLOT})
    with pytest.raises(ValueError, match="already defined in"):
        make_catalog({fresh: SHIPPED, code: SHIPPED})
    # The refused catalog is not registered; the first definition stands.
    assert catalogs.lookup(fresh) is None
    assert catalogs.lookup(code) is first[code]
    with pytest.raises(ValueError, match="already defined in"):
        make_catalog({}).add(code, **SHIPPED)


def test_a_builtin_code_cannot_be_redefined(make_catalog: Callable[..., ErrorCatalog]) -> None:
    with pytest.raises(ValueError, match="guarded_tools"):
        make_catalog({"invalid_input": SHIPPED})
    assert catalogs.lookup("invalid_input") == BUILTIN["invalid_input"]


def test_redefining_a_namespace_replaces_it(make_catalog: Callable[..., ErrorCatalog],
                                            codes: tuple[str, str]) -> None:
    code, _ = codes
    namespace = f"test_{uuid.uuid4().hex[:8]}"
    make_catalog({code: SLOT}, namespace)
    again = make_catalog({code: SHIPPED}, namespace)
    assert catalogs.lookup(code) is again[code]
    exported = [c for c in export_json()["catalogs"] if c["namespace"] == namespace]
    assert len(exported) == 1
    assert exported[0]["errors"][0]["message"] == SHIPPED["message"]


@pytest.mark.parametrize(
    ("code", "spec", "error"),
    [
        ("Bad-Code", SHIPPED, ValueError),
        ("", SHIPPED, ValueError),
        ("ok_code_x", {**SHIPPED, "retry": "sometimes"}, ValueError),
        ("ok_code_y", {**SHIPPED, "status": 99}, ValueError),
        ("ok_code_z", {**SHIPPED, "status": "409"}, ValueError),
        ("ok_code_w", {"message": "m", "fix": "f"}, TypeError),  # no why
        ("ok_code_v", {**SHIPPED, "colour": "red"}, TypeError),
    ],
)
def test_malformed_entries_are_refused_at_definition(
    make_catalog: Callable[..., ErrorCatalog], code: str, spec: dict[str, Any],
    error: type[Exception]
) -> None:
    with pytest.raises(error):
        make_catalog({code: spec})
    assert catalogs.lookup(code) is None


# -- exports --------------------------------------------------------------------------------------


def test_export_json_lists_every_catalog_from_the_same_definitions(
    make_catalog: Callable[..., ErrorCatalog], codes: tuple[str, str]
) -> None:
    slot, shipped = codes
    shop = make_catalog({slot: SLOT, shipped: SHIPPED})
    data = export_json("https://docs.example/")
    json.dumps(data)  # serializable as is
    by_namespace = {c["namespace"]: c["errors"] for c in data["catalogs"]}
    assert {e["code"] for e in by_namespace["guarded_tools"]} == set(BUILTIN.entries)
    exported = {e["code"]: e for e in by_namespace[shop.namespace]}
    assert exported[slot] == {
        "code": slot,
        "status": 409,
        "retry": "after_repair",
        "message": SLOT["message"],
        "why": SLOT["why"],
        "fix": SLOT["fix"],
        "link": "https://docs.example/#slot_stale",
    }
    # What is exported is what is raised.
    for code, entry in exported.items():
        raised = shop.error(code).as_dict("https://docs.example/")
        for key in ("code", "retry", "why", "fix", "link"):
            assert raised[key] == entry[key]
        assert shop.error(code).status_code == entry["status"]
    codes_everywhere = [e["code"] for c in data["catalogs"] for e in c["errors"]]
    assert len(codes_everywhere) == len(set(codes_everywhere))


def test_export_json_without_docs_url_keeps_anchors(make_catalog: Callable[..., ErrorCatalog],
                                                    codes: tuple[str, str]) -> None:
    code, other = codes
    shop = make_catalog({code: SHIPPED, other: {**SHIPPED, "link": ""}})
    errors = next(c["errors"] for c in export_json()["catalogs"]
                  if c["namespace"] == shop.namespace)
    assert errors[0]["link"] == "#order_already_shipped"
    assert "link" not in errors[1]


def test_export_llms_txt(make_catalog: Callable[..., ErrorCatalog],
                         codes: tuple[str, str]) -> None:
    slot, shipped = codes
    shop = make_catalog({
        slot: SLOT,
        shipped: {**SHIPPED, "why": "The order\n   left the\twarehouse.", "link": ""},
    })
    text = export_llms_txt("https://docs.example", title="Shop")
    lines = text.splitlines()
    assert lines[0] == "# Shop: errors"
    assert lines[2].startswith("> ")
    assert "## guarded_tools" in lines
    assert f"## {shop.namespace}" in lines
    start = lines.index(f"### {slot} (HTTP 409, retry: after_repair)")
    assert lines[start + 1] == f"- why: {SLOT['why']}"
    assert lines[start + 2] == f"- fix: {SLOT['fix']}"
    assert lines[start + 3] == "- link: https://docs.example#slot_stale"
    start = lines.index(f"### {shipped} (HTTP 409, retry: never)")
    # Multi-line definitions stay on their list item.
    assert lines[start + 1] == "- why: The order left the warehouse."
    assert lines[start + 3 : start + 4] in ([], [""])  # no link line for this one
    for code in BUILTIN.entries:
        entry = BUILTIN[code]
        assert f"### {code} (HTTP {entry.status}, retry: {entry.retry})" in lines


@pytest.mark.parametrize(
    ("link", "docs", "expected"),
    [
        ("#slot_stale", "https://d.example/errors/", "https://d.example/errors/#slot_stale"),
        ("#slot_stale", "https://d.example/errors#top", "https://d.example/errors#slot_stale"),
        ("#slot_stale", "", "#slot_stale"),
        ("https://other.example/x#y", "https://d.example", "https://other.example/x#y"),
        ("", "https://d.example", ""),
    ],
)
def test_resolve_link(link: str, docs: str, expected: str) -> None:
    assert resolve_link(link, docs) == expected


def test_builtin_catalog_is_complete() -> None:
    for entry in BUILTIN:
        assert isinstance(entry, CatalogEntry)
        assert entry.why and entry.fix and entry.message
        assert entry.link == f"#{entry.code}"
        assert entry.retry in ("never", "as_is", "after_repair")


@settings(max_examples=60, deadline=None)
@given(
    why=st.text(min_size=1, max_size=200),
    fix=st.text(min_size=1, max_size=200),
    retry=st.sampled_from(["never", "as_is", "after_repair"]),
    status=st.integers(min_value=400, max_value=499),
)
def test_any_definition_exports_and_raises_consistently(
    why: str, fix: str, retry: str, status: int
) -> None:
    namespace = f"test_{uuid.uuid4().hex[:8]}"
    code = _code()
    try:
        shop = ErrorCatalog(namespace, {code: {"status": status, "retry": retry,
                                               "message": "m", "why": why, "fix": fix}})
        exported = next(c for c in export_json()["catalogs"] if c["namespace"] == namespace)
        assert exported["errors"][0]["why"] == why
        assert exported["errors"][0]["fix"] == fix
        raised = shop.error(code)
        assert (raised.status_code, raised.retry, raised.why, raised.fix) == (
            status, retry, why, fix
        )
        section = export_llms_txt().split(f"### {code} ")[1].split("\n\n")[0]
        assert len(section.splitlines()) == 3  # heading, why, fix: nothing spills over
    finally:
        catalogs.remove(namespace)
