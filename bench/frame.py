"""``python -m bench.frame [N] [ROUNDS]``: where a keyed MCP call's cost beyond F-K goes.

F-K (``bench.floor.keyed_mcp_floor``) sends the keyed call's statements and nothing else.
**F-K+** (``bench.floor.keyed_features_floor``, ``/agent/mcp/floor/features/``) adds everything
the keyed call does for its caller, written inline: the body read with the size limit and
parsed strictly, the tool's compiled input validator, the fingerprint of the input, the
replay cache read before the claim and written after it, the call's events (to the
tool's and the site's observers), the output encoded once, and the app's answer. What it
leaves out is the guard's frame: DRF's view policies, the JSON-RPC routing, the
``Invocation``, the ``Gateway`` and the ``Pipeline`` with its ``Call``, its stage walks and
the store's ``Operation`` row. PostgreSQL only, as F-K.

In process, through Django's WSGI handler, against the database in ``DATABASE_URL``
prepared by ``python -m bench.prepare``: blocks of N keyed ``tools/call`` of
``echo_keyed`` (a fresh key per call, the bench user's DRF token, each answer checked),
taking turns, each block timed on this process's CPU clock. Besides the app, F-K and F-K+,
it serves the app with one layer of its frame at a time replaced by F-K+'s work, from
the outside in (a measurement patch, restored after its block):

- ``app, serve``: McpView's DRF policies kept, the JSON-RPC answer made by F-K+;
- ``app, _call``: the JSON-RPC routing kept as well, the call made by F-K+;
- ``app, Gateway.run``: the ``Invocation`` kept as well, the pipeline replaced by F-K+;
- ``app, Pipeline.claimed``: the pipeline's run kept as well (its events, the stages
  before the claim, the replay cache), the claim, the handler and the completion made by
  F-K+'s statements.

Prints each one's median ratio to F-K, block by block, and the steps between them.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from itertools import pairwise
from typing import Any

sys.path[0] = os.getcwd()  # not bench/ (its profile.py would shadow the stdlib's)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")


# -- the app with one layer of its frame replaced by F-K+'s work ----------------------------
def _serve(request: Any, body: Any) -> Any:
    from bench.floor import keyed_call, tool_result
    from guarded_tools.core.registry import registry
    from guarded_tools.transports.mcp.protocol import json_response

    params = body["params"]
    result = tool_result(*keyed_call(request.user, registry.find(params["name"]),
                                     params["arguments"]))
    return json_response({"jsonrpc": "2.0", "id": body["id"], "result": result})


def _call(ex: Any, params: Any, definition: Any, arguments: dict[str, Any]) -> dict[str, Any]:
    from bench.floor import keyed_call, tool_result

    return tool_result(*keyed_call(ex.request.user, definition, arguments))


def _run(gateway: Any, inv: Any) -> Any:
    from bench.floor import keyed_call
    from guarded_tools.pipeline import GuardResult

    output_json, summary = keyed_call(inv.user, gateway.tool, inv.input)
    return GuardResult(output={"value": inv.input["value"]}, operation=summary,
                       output_json=output_json)


def _claimed(pipeline: Any, call: Any) -> Any:
    from bench.floor import claimed_echo
    from guarded_tools.pipeline import GuardResult

    inv = call.inv
    output, output_json, summary = claimed_echo(inv.user, pipeline.tool.name, inv.scope,
                                                inv.key, inv.fingerprint, inv.input, call.events)
    return GuardResult(output=output, operation=summary, output_json=output_json)


@contextmanager
def replaced(layer: str) -> Iterator[None]:
    """The app with ``layer`` (``serve``, ``_call``, ``Gateway.run``,
    ``Pipeline.claimed``) replaced by its stand-in, for a block."""
    from guarded_tools.pipeline import Pipeline
    from guarded_tools.pipeline.gateway import Gateway
    from guarded_tools.transports.mcp import server, tool_methods

    owner, name, stand_in = {
        "serve": (server, "serve", _serve),
        "_call": (tool_methods, "_call", _call),
        "Gateway.run": (Gateway, "run", _run),
        "Pipeline.claimed": (Pipeline, "claimed", _claimed),
    }[layer]
    original = vars(owner)[name]
    setattr(owner, name, stand_in)
    try:
        yield
    finally:
        setattr(owner, name, original)


#: What is measured, from the outside in: its name, its path, the layer replaced (None: the
#: code as it is), and what it adds to the side before it (the step printed).
SIDES = [
    ("F-K", "/agent/mcp/floor/", None, ""),
    ("F-K+", "/agent/mcp/floor/features/", None, "the call's features"),
    ("app, serve", "/agent/mcp/", "serve", "DRF's view policies"),
    ("app, _call", "/agent/mcp/", "_call", "the JSON-RPC routing"),
    ("app, Gateway.run", "/agent/mcp/", "Gateway.run", "the Invocation"),
    ("app, Pipeline.claimed", "/agent/mcp/", "Pipeline.claimed",
     "the pipeline's run around the claim"),
    ("app", "/agent/mcp/", None, "the claim's way through the pipeline and the store"),
]


def main(argv: list[str]) -> None:
    import django

    django.setup()
    n = int(argv[0]) if argv else 50
    rounds = int(argv[1]) if len(argv) > 1 else 20
    from bench.keyedpath import caller  # a keyed call of echo_keyed, its answer checked

    calls = {name: caller(path, rest=False) for name, path, _, _ in SIDES}
    counter = 0
    for name, _, layer, _ in SIDES:  # warm up every side and every layer's stand-in
        with replaced(layer) if layer else nullcontext():
            for _ in range(100):
                counter += 1
                calls[name](counter)
    ratios: dict[str, list[float]] = {name: [] for name, _, _, _ in SIDES}
    per_call: dict[str, list[float]] = {name: [] for name, _, _, _ in SIDES}
    for r in range(rounds):
        order = SIDES[r % len(SIDES):] + SIDES[:r % len(SIDES)]  # rotate who goes first
        cost: dict[str, float] = {}
        for name, _, layer, _ in order:
            with replaced(layer) if layer else nullcontext():
                start = time.process_time()
                for _ in range(n):
                    counter += 1
                    calls[name](counter)
                cost[name] = (time.process_time() - start) / n
        for name in cost:
            ratios[name].append(cost[name] / cost["F-K"])
            per_call[name].append(cost[name] * 1e6)
    print(f"keyed MCP call in process, {rounds} rounds of {n} calls per side,"
          " this process's CPU")
    print(f"  {'side':22} {'µs per call':>12} {'x F-K':>7}  (per round: min-max)")
    medians = {name: statistics.median(ratios[name]) for name in ratios}
    for name, _, _, _ in SIDES:
        print(f"  {name:22} {statistics.median(per_call[name]):12.0f} {medians[name]:7.3f}"
              f"  ({min(ratios[name]):.3f}-{max(ratios[name]):.3f})")
    print("  steps, in F-K's CPU (each side less the one before it):")
    for (before, *_), (name, _, _, adds) in pairwise(SIDES):
        print(f"    {adds:52} ({name} less {before}) {medians[name] - medians[before]:+.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
