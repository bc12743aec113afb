"""The side-by-side runs of the bench: how their rounds become ratios, noise and verdicts.

``bench/run.py --against REF`` (this checkout and REF's), and the peer table
(``bench/peer.py``: FastMCP 4 and django-mcpz beside the app's calls, in one run whose
order rotates), with ``bench/mcp.lua``'s check of every answer under wrk.
"""

from __future__ import annotations

import argparse
import json
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from bench import peer, sidebyside


def runs(rps: dict[str, list[float]]) -> dict[str, list[dict[str, Any]]]:
    return {name: [{"rps": x, "p50_ms": 1.0, "non_2xx": 0, "socket_errors": 0,
                    "cpu_us": {"app": 1000.0 / x * 100, "db": 100.0}} for x in values]
            for name, values in rps.items()}


def side(a: list[float], b: list[float]) -> dict[str, list[dict[str, Any]]]:
    """A side whose A serves ``a`` and B ``b`` per round; C, D, R level with A."""
    return runs({"A": a, "B": b, "C": a, "D": a, "R-plain": a, "R-guarded": a})


def test_new_over_old_is_taken_round_by_round_and_judged_against_its_spread() -> None:
    new = side([100, 200, 100], [50, 100, 50])  # B/A 0.5 in every round
    old = side([100, 100, 200], [60, 60, 120])  # B/A 0.6 in every round
    result = sidebyside.summarize({"new": new, "old": old})
    b = result["new_over_old"]["B/A"]
    assert b["rounds"] == [0.833, 0.833, 0.833]
    assert b["verdict"] == "slower beyond noise"  # below 1 in every round
    assert result["new_over_old"]["C/A"]["verdict"] == "within noise"  # level: 1.0 each round
    assert result["sides"]["new"]["ratios"]["B/A"] == {"median": 0.5, "rounds": [0.5] * 3}


def test_a_drop_in_some_rounds_only_is_within_the_noise() -> None:
    new = side([100, 100, 100], [50, 70, 50])
    old = side([100, 100, 100], [60, 60, 60])
    verdict = sidebyside.summarize({"new": new, "old": old})["new_over_old"]["B/A"]
    assert verdict["min"] < 1 < verdict["max"] and verdict["verdict"] == "within noise"


def test_the_table_shows_both_sides_and_the_cpu_per_request() -> None:
    data = sidebyside.summarize({"new": side([100], [50]), "old": side([100], [60])})
    results = {"meta": {"new": "a" * 40, "old": "b" * 40, "against": "main", "rounds": 1,
                        "duration_s": 4, "load_average_start": [1.0],
                        "load_average_end": [2.0]},
               "databases": {"postgresql": data}}
    text = sidebyside.table(results)
    assert "| B/A | **0.500** (0.50) | **0.600** (0.60) | **0.833** (0.83)" in text
    assert "| B | 50 (50 to 50) | 60 (60 to 60) | 2100 | 1767 | 1.189 |" in text


# -- the peer table (bench/peer.py): FastMCP 4 and django-mcpz beside the app, one run --------
def peer_runs(rps: dict[str, list[float]], cpu: dict[str, list[float]] | None = None,
              checks: dict[str, str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Every (server, call) pair of the peer table, one run per round: ``rps[name]`` its
    throughput per round (100 when not named), ``cpu[name]`` its app CPU per call."""
    names = [c[0] for c in peer.configs()]
    rounds = len(next(iter(rps.values())))
    out: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        out[name] = [{"rps": (rps.get(name) or [100.0] * rounds)[i], "p50_ms": 1.0,
                      "p99_ms": 2.0, "round": i,
                      "cpu_us": {"app": (cpu or {}).get(name, [1000.0] * rounds)[i]},
                      "check": (checks or {}).get(name, "ok")}
                     for i in range(rounds)]
    return out


def test_the_peer_table_serves_each_peer_under_both_servers_beside_the_app() -> None:
    pairs = {(c[2], c[3]) for c in peer.configs()}
    assert pairs == {(f"{f}-{s}", tool) for s in ("uvicorn", "gunicorn")
                     for f, tool in (("fastmcp", "echo"), ("mcpz", "echo"), ("app", "echo"),
                                     ("app", "echo_keyed"))}
    # django-mcpz: a sync gunicorn worker, and Django's ASGI handler (no wrapper) under uvicorn
    assert peer.SERVERS["mcpz-gunicorn"][2] == ["bench.mcpz.wsgi:application",
                                                "--worker-class", "sync"]
    assert peer.SERVERS["mcpz-uvicorn"][2] == ["bench.mcpz.asgi:application"]
    env = peer.server_env("mcpz-uvicorn", {"DJANGO_SETTINGS_MODULE": "bench.settings"})
    assert env["DJANGO_SETTINGS_MODULE"] == "bench.mcpz.settings"
    assert "DJANGO_SETTINGS_MODULE" not in peer.server_env("fastmcp-uvicorn", env)
    assert [c[0] for c in peer.configs() if c[4]] == ["uvicorn keyed", "uvicorn F-K",
                                                      "gunicorn keyed", "gunicorn F-K"]
    # F-K: the keyed call's floor, on the app's own servers, under the MCP endpoint's path
    # (which the app's ASGI entry serves as MCP); every other call at its server's MCP path
    assert peer.path_of("uvicorn F-K", "app-uvicorn") == "/agent/mcp/floor/"
    assert peer.path_of("gunicorn F-K", "app-gunicorn") == "/agent/mcp/floor/"
    # F-M: the read-only call's floor, anonymous as the read call, under the same prefix
    assert [c[3] for c in peer.configs() if c[0].endswith(" F-M")] == ["echo", "echo"]
    assert peer.path_of("uvicorn F-M", "app-uvicorn") == "/agent/mcp/floor/read/"
    assert peer.path_of("gunicorn F-M", "app-gunicorn") == "/agent/mcp/floor/read/"
    assert peer.path_of("uvicorn keyed", "app-uvicorn") == "/agent/mcp/"
    assert peer.path_of("uvicorn FastMCP", "fastmcp-uvicorn") == "/mcp/"


def test_peer_ratios_are_taken_round_by_round_to_fastmcp_and_to_django_mcpz() -> None:
    # FastMCP under uvicorn and django-mcpz under gunicorn move with the machine's load
    # from round to round; the read-only call under gunicorn is 0.5x django-mcpz's in every
    # round, whatever the load: the ratio of the medians (300/500) would say 0.6.
    runs = peer_runs({"uvicorn FastMCP": [100, 400, 200],
                      "gunicorn django-mcpz": [200, 800, 500],
                      "gunicorn read": [100, 400, 250],
                      "uvicorn read": [150, 600, 300]},
                     cpu={"gunicorn django-mcpz": [500, 500, 400],
                          "gunicorn read": [1000, 750, 800]})
    result = peer.summarize(peer.configs(), runs)
    read = result["configs"]["gunicorn read"]
    assert read["ratios"]["django-mcpz (gunicorn)"] == {"median": 0.5, "rounds": [0.5] * 3}
    assert read["ratios"]["FastMCP 4.1.6"] == {"median": 1.0, "rounds": [1.0, 1.0, 1.25]}
    assert read["cpu_ratio"] == {"median": 2.0, "rounds": [2.0, 1.5, 2.0]}
    assert result["configs"]["uvicorn read"]["ratios"]["FastMCP 4.1.6"]["rounds"] == [1.5] * 3
    reference = result["configs"]["uvicorn FastMCP"]["ratios"]["FastMCP 4.1.6"]
    assert reference == {"median": 1.0, "rounds": [1.0] * 3}
    targets = {t["config"]: t for t in result["targets"]}
    assert targets["gunicorn read"]["least"] == 1.0 and not targets["gunicorn read"]["met"]
    assert targets["gunicorn read"]["verdict"] == "MISSED"
    assert targets["uvicorn read"]["least"] == 1.5 and targets["uvicorn read"]["met"]
    assert targets["uvicorn keyed"]["reference"] == "uvicorn FastMCP"
    # 100 req/s in every round against 100, 400, 200: 1.0, 0.25, 0.5
    assert targets["uvicorn keyed"] | {"met": None} == {
        "target": "keyed fresh call, PostgreSQL, under uvicorn ≥ 0.6x FastMCP 4.1.6",
        "config": "uvicorn keyed", "reference": "uvicorn FastMCP", "least": 0.6,
        "median": 0.5, "rounds": [1.0, 0.25, 0.5], "met": None, "verdict": "MISSED"}


def test_a_target_is_not_met_when_a_check_of_its_run_failed() -> None:
    runs = peer_runs({"uvicorn FastMCP": [100], "uvicorn read": [400]},
                     checks={"uvicorn read": "3 bad responses, 0 socket errors"})
    result = peer.summarize(peer.configs(), runs)
    target = next(t for t in result["targets"] if t["config"] == "uvicorn read")
    assert target["median"] == 4.0 and not target["met"]
    assert target["verdict"] == "not judged: a check failed"
    assert result["configs"]["uvicorn read"]["checks"] == ["3 bad responses, 0 socket errors"]


def test_the_peer_report_prints_each_row_its_ratios_and_what_each_side_does() -> None:
    runs = peer_runs({"uvicorn FastMCP": [200], "gunicorn django-mcpz": [800],
                      "gunicorn read": [400], "uvicorn keyed": [100]},
                     cpu={"gunicorn django-mcpz": [500], "gunicorn read": [750]})
    result = peer.summarize(peer.configs(), runs)
    text = peer.table(result)
    names = [c[0] for c in peer.configs()]
    rows = {" ".join(line.split()[:2]): line.split() for line in text.splitlines()
            if " ".join(line.split()[:2]) in names}
    assert sorted(rows) == sorted(names)
    # req/s, app µs, ratio to FastMCP, ratio to django-mcpz (gunicorn), CPU to django-mcpz's
    assert rows["gunicorn read"][2:7] == ["400.0", "750", "2.00", "0.50", "1.50"]
    assert rows["uvicorn keyed"][2:7] == ["100.0", "1000", "0.50", "0.12", "2.00"]
    for side in ("FastMCP", "django-mcpz", "read", "keyed"):
        block = text.split(f"\n    {side}: ", 1)[1].split("\n    ", 4)
        assert [line.split(":")[0].strip() for line in block[1:4]] == [
            "authentication", "validation", "persistence"], block
    assert "the output is not validated" in text.split("\n    FastMCP: ", 1)[1].split("\n    ")[2]
    assert ("read-only call under gunicorn ≥ 1.0x django-mcpz under gunicorn: 0.50"
            " (per round: 0.50): MISSED") in text
    assert "keyed fresh call, PostgreSQL, under uvicorn ≥ 0.6x FastMCP 4.1.6: 0.50" in text
    md = peer.markdown(result)
    assert "| gunicorn read: the app's read-only `echo`, anonymous (allow_anonymous) | 400 |" \
        " 750 µs | 2.00 | 0.50 | 1.50 |" in md
    assert "| django-mcpz | none: `public`" in md


def test_the_keyed_call_is_judged_against_its_floor_and_the_floor_against_fastmcp() -> None:
    # F-K serves 0.5x FastMCP in every round: the 0.6x peer target lies above the floor.
    runs = peer_runs({"uvicorn FastMCP": [200, 400, 300], "uvicorn keyed": [80, 180, 120],
                      "uvicorn F-K": [100, 200, 150], "gunicorn keyed": [90, 90, 90],
                      "gunicorn F-K": [100, 100, 100]},
                     cpu={"uvicorn keyed": [1100, 1200, 1000], "uvicorn F-K": [1000] * 3,
                          "gunicorn keyed": [1050] * 3, "gunicorn F-K": [1000] * 3})
    result = peer.summarize(peer.configs(), runs)
    fk = result["floor"]["uvicorn"]
    assert fk["keyed/F-K rps"] == {"median": 0.8, "rounds": [0.8, 0.9, 0.8]}
    assert fk["keyed/F-K app CPU"] == {"median": 1.1, "rounds": [1.1, 1.2, 1.0]}
    assert fk["F-K/FastMCP rps"] == {"median": 0.5, "rounds": [0.5] * 3}
    assert result["floor"]["gunicorn"]["keyed/F-K app CPU"]["median"] == 1.05
    target = next(t for t in result["floor_targets"] if t["floor"] == "uvicorn F-K")
    assert target | {"rounds": None} == {
        "target": "keyed's app CPU ≤ 1.10x F-K's, under uvicorn", "config": "uvicorn keyed",
        "floor": "uvicorn F-K", "measure": "cpu", "limit": 1.1, "median": 1.1, "rounds": None,
        "met": True, "verdict": "met"}
    text = peer.table(result)
    assert ("    uvicorn: keyed/F-K req/s 0.80, app CPU 1.10; F-K/FastMCP 4.1.6 (uvicorn) req/s"
            " 0.50 (per round: 0.50, 0.50, 0.50)") in text
    assert ("keyed's app CPU ≤ 1.10x F-K's, under uvicorn: 1.10 (per round: 1.10, 1.20, 1.00):"
            " met") in text
    assert ("the peer target's 0.60x FastMCP against the floor: F-K serves 0.50x under uvicorn,"
            " below it") in text
    assert "    F-K: the keyed call's floor" in text
    md = peer.markdown(result)
    assert "| uvicorn | 0.80 | 1.10 | 0.50 |" in md
    assert ("| keyed's app CPU ≤ 1.10x F-K's, under uvicorn | **1.10** (1.10, 1.20, 1.00) |"
            " met |") in md
    # a failed check of the floor's run: not judged
    failed = peer.summarize(peer.configs(), {**runs, "uvicorn F-K": peer_runs(
        {"uvicorn F-K": [100, 200, 150]}, checks={"uvicorn F-K": "1 bad responses"}
    )["uvicorn F-K"]})
    assert failed["floor_targets"][0]["verdict"] == "not judged: a check failed"
    assert not failed["floor_targets"][0]["met"]


def test_the_read_call_is_judged_against_its_floor_and_the_floor_against_django_mcpz() -> None:
    # F-M serves 0.8x django-mcpz under gunicorn in every round at 1.25x its app CPU: the
    # read call's 1.0x peer target lies above what the floor serves.
    runs = peer_runs({"gunicorn django-mcpz": [500, 1000, 800], "gunicorn read": [360, 760, 576],
                      "gunicorn F-M": [400, 800, 640], "uvicorn read": [90] * 3,
                      "uvicorn F-M": [100] * 3},
                     cpu={"gunicorn django-mcpz": [400, 400, 320],
                          "gunicorn read": [550, 600, 420], "gunicorn F-M": [500, 500, 400],
                          "uvicorn read": [1000] * 3, "uvicorn F-M": [1000] * 3})
    result = peer.summarize(peer.configs(), runs)
    fm = result["floor"]["gunicorn"]
    assert fm["read/F-M rps"] == {"median": 0.9, "rounds": [0.9, 0.95, 0.9]}
    assert fm["read/F-M app CPU"] == {"median": 1.1, "rounds": [1.1, 1.2, 1.05]}
    assert fm["F-M/django-mcpz rps"] == {"median": 0.8, "rounds": [0.8] * 3}
    assert fm["F-M/django-mcpz app CPU"] == {"median": 1.25, "rounds": [1.25] * 3}
    assert result["floor"]["uvicorn"]["read/F-M rps"]["median"] == 0.9
    target = next(t for t in result["floor_targets"] if t["floor"] == "gunicorn F-M")
    assert target == {
        "target": "read-only call's app CPU ≤ 1.10x F-M's, under gunicorn",
        "config": "gunicorn read", "floor": "gunicorn F-M", "measure": "cpu", "limit": 1.1,
        "median": 1.1, "rounds": [1.1, 1.2, 1.05], "met": True, "verdict": "met"}
    text = peer.table(result)
    assert ("    gunicorn: read/F-M req/s 0.90, app CPU 1.10; F-M/django-mcpz (gunicorn) req/s"
            " 0.80 (per round: 0.80, 0.80, 0.80), app CPU 1.25 (per round: 1.25, 1.25, 1.25)"
            ) in text
    assert ("read-only call's app CPU ≤ 1.10x F-M's, under gunicorn: 1.10 (per round: 1.10,"
            " 1.20, 1.05): met") in text
    assert ("the peer target's 1.00x django-mcpz against the floor: F-M serves 0.80x under"
            " gunicorn, below it") in text
    assert "    F-M: the read-only call's floor" in text
    md = peer.markdown(result)
    assert "| gunicorn | 0.90 | 1.10 | 0.80 | 1.25 |" in md
    assert ("| read-only call's app CPU ≤ 1.10x F-M's, under gunicorn | **1.10** (1.10, 1.20,"
            " 1.05) | met |") in md
    # a failed check of the floor's run: not judged
    failed = peer.summarize(peer.configs(), {**runs, "gunicorn F-M": peer_runs(
        {"gunicorn F-M": [400, 800, 640]}, checks={"gunicorn F-M": "1 bad responses"}
    )["gunicorn F-M"]})
    verdict = next(t for t in failed["floor_targets"] if t["floor"] == "gunicorn F-M")
    assert verdict["verdict"] == "not judged: a check failed" and not verdict["met"]
    # a report written before F-M was measured still prints
    old = {**result, "floor": {s: {k: v for k, v in f.items() if "F-M" not in k}
                               for s, f in result["floor"].items()}}
    assert "read/F-M" not in peer.table(old) and "read/F-M" not in peer.markdown(old)


# -- bench/mcp.lua under wrk: every answer checked for what it answers -------------------------
class Answers(BaseHTTPRequestHandler):
    """A stand-in MCP endpoint that answers each tools/call as ``server.mode`` says."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        call = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        n, arguments = call["id"], call["params"]["arguments"]
        mode = self.server.mode  # type: ignore[attr-defined]
        if mode == "the first answer again":  # right but for another request: id 1, value 1
            n = arguments["value"] = 1
        value = n + 1 if mode == "wrong value" else arguments["value"]
        result: dict[str, Any] = {
            "content": [{"type": "text", "text": json.dumps({"value": value})}],
            "isError": mode == "isError", "structuredContent": {"value": value}}
        if mode == "text disagrees":
            result["content"][0]["text"] = json.dumps({"value": value + 1})
        if mode == "no structuredContent":
            del result["structuredContent"]
        if "operationId" in arguments:
            key = "another" if mode == "another key" else arguments["operationId"]
            result["_meta"] = {"operation": {"id": "a-uuid", "key": key, "replayed": False}}
        body = json.dumps({"jsonrpc": "2.0", "id": n,
                           "result": result}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def answers() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.once
@pytest.mark.skipif(shutil.which("wrk") is None, reason="needs wrk (apt-get install wrk)")
@pytest.mark.parametrize(("mode", "prefix"), [
    ("right", ""), ("right", "k"), ("wrong value", ""), ("text disagrees", ""),
    ("no structuredContent", ""), ("isError", ""), ("the first answer again", ""),
    ("another key", "k")])
def test_mcp_lua_counts_only_the_answers_that_echo_their_own_request(
        answers: ThreadingHTTPServer, mode: str, prefix: str) -> None:
    answers.mode = mode  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{answers.server_address[1]}/mcp/"
    args = argparse.Namespace(threads=2, connections=2)
    result = peer.run_wrk(url, "echo", prefix, "", 1, args)
    assert result["requests"] > 10
    if mode == "right":
        assert result["ok"] == result["requests"] and result["bad"] == 0
        assert peer.check(result, None) == "ok"
    else:
        # the first answer is right once per thread at most: for the first id it awaits
        assert result["ok"] <= (2 if mode == "the first answer again" else 0)
        assert result["bad"] > 0
        assert peer.check(result, None) != "ok"
