// The TypeScript MCP SDK's OAuth client, driven by tests/integration/test_oauth_e2e.py over stdio.
// argv: the MCP URL, the redirect URI, the tool to call. Writes one JSON object per line
// to stdout ({"authorize": url}, {"listed": ...}, ...); reads the authorization code, and
// later "revoked", one per line from stdin. Registers by Dynamic Client Registration.
import { createInterface } from "node:readline";
import { randomUUID } from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";

const [url, redirectUri, toolName] = process.argv.slice(2);
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const say = (message) => process.stdout.write(JSON.stringify(message) + "\n");
const next = async () => (await lines.next()).value;

const store = {};
const provider = {
  get redirectUrl() { return redirectUri; },
  get clientMetadata() {
    return {
      client_name: "E2E host (TypeScript SDK)",
      redirect_uris: [redirectUri],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  },
  clientInformation: () => store.client,
  saveClientInformation: (info) => { store.client = info; },
  tokens: () => store.tokens,
  saveTokens: (tokens) => { store.tokens = tokens; },
  redirectToAuthorization: (authorizationUrl) => {
    store.redirects = (store.redirects ?? 0) + 1;
    say({ authorize: authorizationUrl.toString() });
  },
  saveCodeVerifier: (verifier) => { store.verifier = verifier; },
  codeVerifier: () => store.verifier,
};

async function connected() {
  const client = new Client({ name: "guarded-tools-e2e", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { authProvider: provider }));
  return client;
}

try {
  let client;
  const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
  try {
    client = new Client({ name: "guarded-tools-e2e", version: "1.0.0" });
    await client.connect(transport);
  } catch (error) {
    if (!(error instanceof UnauthorizedError)) throw error;
    await transport.finishAuth(await next()); // the code the browser was redirected with
    client = await connected();
  }
  const listed = await client.listTools();
  say({ listed: listed.tools.map((t) => t.name) });
  const operationId = randomUUID();
  const result = await client.callTool({ name: toolName, arguments: { operationId } });
  say({ called: { isError: result.isError ?? false }, clientId: store.client?.client_id,
        accessToken: store.tokens?.access_token });
  await next(); // "revoked": the user revoked the connection in the browser
  const revokedToken = store.tokens?.access_token;
  let afterRevoke = "succeeded";
  try {
    // The replay of the call that succeeded: the SDK sees the 401, and its refresh token
    // is refused too (revoking a connection revokes both).
    await client.callTool({ name: toolName, arguments: { operationId } });
  } catch (error) {
    afterRevoke = error?.name ?? String(error);
  }
  const raw = await fetch(url, {
    method: "POST",
    headers: { Authorization: `Bearer ${revokedToken}`, "Content-Type": "application/json",
               Accept: "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 9, method: "tools/call",
                           params: { name: toolName, arguments: { operationId } } }),
  });
  say({ afterRevoke, status: raw.status, challenge: raw.headers.get("www-authenticate") });
  process.exit(0);
} catch (error) {
  say({ failed: String(error?.stack ?? error) });
  process.exit(1);
}
