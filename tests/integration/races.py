"""The races both databases must win: one key sent by many threads, and by eight processes.

``test_concurrency`` runs them on PostgreSQL, ``test_faults`` on SQLite.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from rest_framework.test import APIClient

from guarded_tools.models import Operation
from tests import forkserver
from tests.conftest import REPO_ROOT, in_threads, key, wait_until
from tests.integration.tools_for_processes import effect_rows

URL = "/agent/tools/{}/"
SCHEMA = {
    "type": "object",
    "properties": {"operationId": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["operationId"],
}


class CountingHandler:
    """Counts executions across threads; sleeps to widen the race window."""

    def __init__(self, sleep: float = 0.05) -> None:
        self.lock = threading.Lock()
        self.keys: list[str] = []
        self.sleep = sleep

    def __call__(self, input: dict[str, Any], ctx: Any) -> Any:
        with self.lock:
            self.keys.append(input["operationId"])
        time.sleep(self.sleep)
        return {"n": input.get("n"), "run": uuid.uuid4().hex}


def one_key_many_threads_over_rest(callers: int, atomic: bool, make_tool: Any, user: Any) -> None:
    """CALLERS threads send one key over REST at once: one execution, the rest replays of it
    (byte for byte) or in-flight answers."""
    handler = CountingHandler(sleep=0.05)
    definition = make_tool(handler, input_schema=SCHEMA, atomic=atomic)
    body = {"operationId": key(), "n": 7}

    def call(_i: int) -> tuple[int, bytes, dict[str, str]]:
        client = APIClient()
        client.force_authenticate(user)
        response = client.post(URL.format(definition.name), body, format="json")
        return response.status_code, response.content, dict(response.headers)

    results = in_threads(callers, call)
    statuses = Counter(status for status, _, _ in results)
    assert set(statuses) <= {200, 409}, statuses
    assert len(handler.keys) == 1
    ok = [(json.loads(content), content, headers) for s, content, headers in results if s == 200]
    fresh = [item for item in ok if not item[0]["operation"]["replayed"]]
    replays = [item for item in ok if item[0]["operation"]["replayed"]]
    assert len(fresh) == 1, statuses
    executed = fresh[0][0]
    assert executed["operation"]["status"] == "succeeded"
    # Every replay is byte-identical, and equal to the execution but for `replayed`.
    assert len({content for _, content, _ in replays}) <= 1
    for data, _content, headers in replays:
        assert headers.get("Idempotent-Replayed") == "true"
        assert data == {**executed, "operation": {**executed["operation"], "replayed": True}}
    for status, content, headers in results:
        if status == 409:
            error = json.loads(content)["error"]
            assert error["code"] == "operation_in_flight"
            if atomic:  # the key was locked: its operation is not a row before it commits
                assert "operation" not in error
            else:
                assert error["operation"]["id"] == executed["operation"]["id"]
            assert int(headers["Retry-After"]) >= 1
    operation = Operation.objects.get(tool=definition.name)
    assert (operation.state, operation.fence, operation.attempts) == ("succeeded", 1, 1)
    assert operation.output == executed["output"]


def one_key_eight_processes(tool_name: str, subprocess_env: dict[str, str], tmp_path: Path) -> None:
    """Separate interpreters, separate connections: the unique constraint (or, for an
    atomic tool, the key's lock in the effect's transaction) decides."""
    k = key()
    go = tmp_path / "go"
    script = (
        "import json, os, sys, time\n"
        "import django\n"
        "django.setup()\n"
        "from guarded_tools.core.errors import GuardError\n"
        "from tests.integration.tools_for_processes import EFFECT_TOOL, register\n"
        "definition = register()[sys.argv[4]]\n"
        "open(sys.argv[1], 'w').close()\n"
        "deadline = time.monotonic() + 60\n"
        "while not os.path.exists(sys.argv[2]) and time.monotonic() < deadline:\n"
        "    time.sleep(0.002)\n"
        "try:\n"
        "    r = definition({'operationId': sys.argv[3], 'sleep': 0.3}, principal='svc')\n"
        "    out = {'kind': 'replayed' if r.replayed else 'executed', 'output': r.output,\n"
        "           'operation': r.operation['id']}\n"
        "except GuardError as e:\n"
        "    out = {'kind': e.code}\n"
        "print(json.dumps(out))\n"
    )
    processes = [
        forkserver.popen(
            [sys.executable, "-c", script, str(tmp_path / f"ready{i}"), str(go), k, tool_name],
            cwd=REPO_ROOT, env=subprocess_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(8)
    ]
    try:
        wait_until(lambda: all((tmp_path / f"ready{i}").exists() for i in range(8)), timeout=180)
        go.touch()
        outputs = [p.communicate(timeout=180) for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert all(p.returncode == 0 for p in processes), [err for _, err in outputs]
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    kinds = Counter(r["kind"] for r in results)
    assert kinds["executed"] == 1, kinds
    assert set(kinds) <= {"executed", "replayed", "operation_in_flight"}, kinds
    assert effect_rows(k).count() == 1
    executed = next(r for r in results if r["kind"] == "executed")
    for r in results:
        if r["kind"] == "replayed":
            assert (r["output"], r["operation"]) == (executed["output"], executed["operation"])
    operation = Operation.objects.get(tool=tool_name, key=k)
    assert (operation.state, operation.fence) == ("succeeded", 1)
