"""The docs' architecture page's examples, run as written: a site adds stages and a
class-based tool by following that page alone."""

from __future__ import annotations

import re
import sys
import types
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from guarded_tools import registry
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.django_db

DOC = REPO_ROOT / "docs" / "explanation" / "architecture.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def example(first_line: str) -> str:
    """The page's code block that opens with ``first_line`` (a file name, as a comment)."""
    found = [block for block in BLOCKS if block.startswith(first_line + "\n")]
    assert len(found) == 1, f"{DOC} has no single block for {first_line}"
    return found[0]


def load(name: str, code: str) -> types.ModuleType:
    """``code`` as the module ``name`` (and its package), as the site's file would be."""
    package = name.rpartition(".")[0]
    sys.modules.setdefault(package, types.ModuleType(package))
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(code, str(DOC), "exec"), module.__dict__)
    return module


@pytest.fixture
def shop() -> Iterator[None]:
    yield
    for name in ("shop.stages", "shop.quiet", "shop.tools", "shop"):
        sys.modules.pop(name, None)
    if "add_note" in registry:
        registry.unregister("add_note")


def test_the_stage_of_the_page_refuses_calls_outside_its_hours(
    shop: None, settings: Any, client_for: Any, alice: Any,
) -> None:
    stages = load("shop.stages", example("# shop/stages.py"))
    namespace: dict[str, Any] = {}
    settings_block = next(b for b in BLOCKS if "GUARDED_TOOLS = {\"STAGES\"" in b)
    exec(settings_block, namespace)
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, **namespace["GUARDED_TOOLS"]}
    assert "shop.stages.OpeningHours" in settings.GUARDED_TOOLS["STAGES"]
    load("shop.tools", example("# shop/tools.py"))
    client = client_for(alice)
    call = {"operationId": str(uuid.uuid4()), "text": "ring twice"}

    stages.OpeningHours.hours = range(0)  # closed all day
    refused = client.post("/agent/tools/add_note/", call, format="json")
    assert refused.status_code == 403, refused.content
    assert "from 8:00 to 20:00" in refused.json()["error"]["message"]

    stages.OpeningHours.hours = range(24)  # open all day
    answered = client.post("/agent/tools/add_note/", call, format="json")
    assert answered.status_code == 200, answered.content
    assert answered.json()["output"] == {"kept": "ring twice"}


def test_the_class_based_tool_of_the_page_is_listed_validated_and_replayed(
    shop: None, client_for: Any, session_client_for: Any, alice: Any,
) -> None:
    load("shop.tools", example("# shop/tools.py"))
    for client in (client_for(alice), session_client_for(alice)):
        listed = {t["name"]: t for t in client.get("/agent/tools/").json()["tools"]}
        assert listed["add_note"]["inputSchema"]["required"] == ["operationId", "text"]
        call = {"operationId": str(uuid.uuid4()), "text": "leave at the door"}
        first = client.post("/agent/tools/add_note/", call, format="json")
        again = client.post("/agent/tools/add_note/", call, format="json")
        assert first.status_code == again.status_code == 200, first.content
        assert first.json()["output"] == {"kept": "leave at the door"}
        assert again.json()["operation"]["replayed"] is True
        invalid = client.post("/agent/tools/add_note/", {**call, "text": ""}, format="json")
        assert invalid.status_code == 422
        assert invalid.json()["error"]["code"] == "invalid_input"


def test_a_stage_written_from_the_page_sees_the_call_and_its_preconditions_run_everywhere(
    shop: None, settings: Any, client_for: Any, alice: Any,
) -> None:
    """The page's second stage, made by the pipeline with no arguments and configured in
    ``STAGES``: it reads the tool, the input and the scope from the call, refuses over
    REST before anything is claimed, and the console's precondition check reaches it
    through the stage list."""
    from guarded_tools.conf import DEFAULTS
    from guarded_tools.core.call import Invocation, principal_scope
    from guarded_tools.core.errors import ToolError
    from guarded_tools.models import Operation
    from guarded_tools.pipeline.gateway import Gateway

    quiet = load("shop.quiet", example("# shop/quiet.py"))
    stages = list(DEFAULTS["STAGES"])
    stages.insert(stages.index("guarded_tools.pipeline.stages.idempotency.IdempotencyStage"),
                  "shop.quiet.QuietNotes")
    seen: list[Any] = []
    settings.GUARDED_TOOLS = {**settings.GUARDED_TOOLS, "STAGES": stages,
                              "OBSERVERS": [seen.append]}
    load("shop.tools", example("# shop/tools.py"))
    client = client_for(alice)

    shouted = {"operationId": str(uuid.uuid4()), "text": "RING TWICE"}
    refused = client.post("/agent/tools/add_note/", shouted, format="json")
    assert refused.status_code == 422, refused.content
    assert refused.json()["error"]["code"] == "shouting"
    assert not Operation.objects.filter(key=shouted["operationId"]).exists()

    call = {"operationId": str(uuid.uuid4()), "text": "ring twice"}
    answered = client.post("/agent/tools/add_note/", call, format="json")
    assert answered.status_code == 200, answered.content
    assert answered.json()["output"] == {"kept": "ring twice"}
    checked = [e for e in seen if e.stage == "quiet_checked"]
    assert checked and checked[-1].extra["scope"] == principal_scope(alice, None)

    gateway = Gateway(registry.get("add_note"))
    with pytest.raises(ToolError):
        gateway.check_preconditions(Invocation(input=shouted, user=alice))
    gateway.check_preconditions(Invocation(input=call, user=alice))
    quiet.QuietNotes.tools = ()
    gateway.check_preconditions(Invocation(input=shouted, user=alice))
