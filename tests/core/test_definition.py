"""Tool definitions that would silently turn a guard off are refused when they are made."""

from __future__ import annotations

from typing import Any

import pytest

from guarded_tools import guard, registry
from guarded_tools.checks import check_tools
from tests.conftest import Effects, key

pytestmark = pytest.mark.django_db
URL = "/agent/tools/{}/"


def declines(**_: Any) -> dict[str, Any]:
    return {"confirmed": False, "reason": "no"}


def test_an_effect_only_confirmation_on_a_read_only_tool_is_refused(make_tool: Any) -> None:
    for confirm in ("effect-only", {"mode": "effect-only", "request": declines}):
        with pytest.raises(ValueError, match="read_only=True with an 'effect-only'"):
            make_tool(read_only=True, confirm=confirm, idempotency_key=None, name="reader")
        with pytest.raises(ValueError, match="confirm='always'"):
            guard(Effects(), read_only=True, confirm=confirm)
    assert "reader" not in registry


def test_a_read_only_tool_confirmed_always_asks_before_every_read(
    make_tool: Any, alice: Any, client_for: Any
) -> None:
    effects = Effects()
    definition = make_tool(effects, read_only=True, idempotency_key=None,
                           confirm={"mode": "always", "request": declines})
    refused = client_for(alice).post(URL.format(definition.name), {}, format="json")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == (
        "confirmation_declined")
    assert effects.count == 0


@pytest.mark.parametrize("mode", ["sometimes", "Always", "effect_only", None, ""])
def test_an_unknown_confirmation_mode_is_refused(mode: Any, make_tool: Any) -> None:
    with pytest.raises(ValueError, match="no stage runs, so the hook would never be called"):
        make_tool(confirm={"mode": mode, "request": declines}, name="unknown_mode")
    assert "unknown_mode" not in registry


@pytest.mark.parametrize("confirm", [True, 1, ["always"]])
def test_a_confirmation_that_is_no_hook_and_no_mode_is_refused(
    confirm: Any, make_tool: Any
) -> None:
    with pytest.raises(ValueError, match="is not a callable, a mapping or a mode"):
        make_tool(confirm=confirm)


def test_changing_the_confirm_mapping_after_registration_changes_nothing(
    make_tool: Any, alice: Any, client_for: Any
) -> None:
    effects = Effects()
    options: dict[str, Any] = {"mode": "always", "request": declines}
    definition = make_tool(effects, confirm=options)
    options["mode"] = "sometimes"  # the site's own dict, reused or changed later
    refused = client_for(alice).post(URL.format(definition.name), {"operationId": key()},
                                     format="json")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == (
        "confirmation_declined")
    assert effects.count == 0 and definition.confirm_mode == "always"


def test_the_system_check_reports_a_registered_tool_that_skips_its_confirmation(
    make_tool: Any,
) -> None:
    definition = make_tool(read_only=True, idempotency_key=None, confirm="always")
    assert not [m for m in check_tools() if m.id == "guarded_tools.E007"]
    object.__setattr__(definition, "confirm", "effect-only")  # past its constructor
    found = [m for m in check_tools() if m.id == "guarded_tools.E007"]
    assert len(found) == 1 and definition.name in found[0].msg
    assert "confirm='always'" in found[0].hint
    object.__setattr__(definition, "confirm", {"mode": "never", "request": declines})
    found = [m for m in check_tools() if m.id == "guarded_tools.E007"]
    assert len(found) == 1 and "'never'" in found[0].msg
