// The official Tasks client (@modelcontextprotocol/ext-tasks) on the TypeScript SDK's 2026-07-28
// Client, driven by tests/integration/test_mcp_tasks_e2e.py. argv: the MCP URL, a DRF token, a scenario,
// then the scenario's arguments. Writes one JSON object per line to stdout; reads a line
// from stdin where the scenario waits for a person (the consent page's decision).
//   call TOOL ARGS           call; print {"created"}; settle by polling; print {"outcome"}
//   cancel TOOL ARGS         call; print {"created"}; cancel; settle; print {"outcome"}
//   cancel-later TOOL ARGS   call; print {"created"}; on a line from stdin cancel, print
//                            {"cancel"} (the ack, or the refusal); settle; {"outcome"}
//   handoff TOOL ARGS        call; print {"created"} with the serialized reference; exit
//   resume REFERENCE         resume a handed-off task in a new process; settle; {"outcome"}
//   snapshot TASK_ID         one tasks/get through a task controller; {"snapshot"} or {"error"}
//   consent TOOL ARGS        call; on the URL elicitation print {"elicit"}, read the user's
//                            answer (accept/decline) from stdin; print {"outcome"}
//   consent-sdk TOOL ARGS    the same with the SDK Client's own callTool and elicitation
//                            handler (its multi round-trip auto-fulfilment), no ext-tasks
// The 2026-07-28 Tasks wire goes through rawDispatch (a plain fetch of the JSON-RPC
// message), as ext-tasks requires: the SDK Client's own codecs reject V2 task shapes.
import { createInterface } from "node:readline";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { createTaskSessionFromClient } from "@modelcontextprotocol/ext-tasks/client";

const PROTOCOL = "2026-07-28";
const ENDPOINT = "guarded-tools-demo"; // the server's stable identity: references survive restarts
const [url, token, scenario, ...rest] = process.argv.slice(2);
const say = (message) => process.stdout.write(JSON.stringify(message) + "\n");
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const headers = { Authorization: `Token ${token}` };
const clientInfo = { name: "guarded-tools-tasks-e2e", version: "1.0.0" };
const clientCapabilities = { elicitation: { url: {} } };
const polls = []; // when each tasks/get was sent (ms), for the poll cadence

let nextId = 1;
async function rawDispatch(request, options = {}) {
  const method = request.method;
  const name = method === "tools/call" ? request.params?.name : request.params?.taskId;
  if (method === "tasks/get") polls.push(Date.now());
  const response = await fetch(url, {
    method: "POST",
    signal: options.signal,
    headers: {
      ...headers,
      ...(options.context?.headers ?? {}),
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
      "MCP-Protocol-Version": PROTOCOL,
      "Mcp-Method": method,
      ...(name === undefined ? {} : { "Mcp-Name": name }),
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: nextId++, ...request }),
  });
  const reply = await response.json();
  return "error" in reply ? { kind: "error", error: reply.error }
                          : { kind: "result", result: reply.result };
}

function described(error) {
  return { name: error?.name, code: error?.code, message: error?.message, data: error?.data };
}

function outcomeOf(settled) {
  const { outcome } = settled;
  if (outcome.status === "completed") return { status: "completed", result: outcome.result };
  if (outcome.status === "failed") {
    const cause = outcome.error?.cause ?? outcome.error;
    return { status: "failed", error: { ...described(outcome.error), cause: described(cause) } };
  }
  return { status: outcome.status };
}

function created(execution) {
  if (execution.kind !== "task") return { kind: execution.kind };
  return { kind: "task", taskId: execution.handle.taskId,
           reference: execution.serializeReference() };
}

const client = new Client(clientInfo, {
  capabilities: clientCapabilities,
  versionNegotiation: { mode: { pin: PROTOCOL } },
});
const answer = async (params, delivery) => {
  say({ elicit: { ...params, delivery } });
  return { action: (await lines.next()).value }; // the user decided on the page
};
client.setRequestHandler("elicitation/create", async (request) =>
  answer(request.params, "sdk-auto-fulfil"));
await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
const session = createTaskSessionFromClient(client, {
  endpointId: ENDPOINT,
  rawDispatch,
  v2RequestFraming: { protocolVersion: PROTOCOL, clientInfo, clientCapabilities },
  onInputRequest: async (request, context) => answer(request.params, context.delivery),
});

try {
  say({ connected: { era: client.getProtocolEra(), capabilities: session.capabilities } });
  if (scenario === "snapshot") {
    try {
      const view = await session.task(rest[0]).snapshot();
      say({ snapshot: { status: view.status, statusMessage: view.statusMessage } });
    } catch (error) {
      say({ error: described(error) });
    }
  } else if (scenario === "consent-sdk") {
    const [tool, args] = rest;
    const result = await client.callTool({ name: tool, arguments: JSON.parse(args) });
    say({ created: { kind: "immediate" } });
    say({ outcome: { status: "completed", result } });
  } else if (scenario === "resume") {
    const execution = await session.resumeTask(JSON.parse(rest[0]));
    say({ resumed: created(execution) });
    say({ outcome: outcomeOf(await execution.settle()), polls });
  } else {
    const [tool, args] = rest;
    const execution = await session.callTool(tool, JSON.parse(args));
    say({ created: created(execution) });
    if (scenario === "handoff") {
      await execution.detach();
    } else {
      if (scenario === "cancel") await execution.cancel();
      if (scenario === "cancel-later") {
        await lines.next(); // the call has started meanwhile
        say({ cancel: await execution.cancel().then(() => ({ acknowledged: true }), described) });
      }
      say({ outcome: outcomeOf(await execution.settle()), polls });
    }
  }
} catch (error) {
  say({ failed: described(error) });
  process.exitCode = 1;
} finally {
  await session.close();
  await client.close();
  process.exit();
}
