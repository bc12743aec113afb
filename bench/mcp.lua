-- wrk script: one MCP `tools/call` per POST (stateless Streamable HTTP, JSON responses,
-- protocol 2025-11-25), and every response checked.
-- Arguments (after --): TOOL PREFIX TOKEN
--   PREFIX "":  arguments {"value": n}
--   PREFIX set: arguments {"operationId": "<PREFIX>-<thread>-<n>", "value": n}, a fresh key per call
--   TOKEN set:  "Authorization: Token TOKEN" (DRF token); empty: anonymous
-- At the end it prints one line: "CHECKED sent=S ok=O bad=B", where ok counts the
-- responses with status 200, a JSON-RPC result and no "isError": true, and bad every other.

local threads = {}
local counter = 1

function setup(thread)
   thread:set("tid", counter)
   counter = counter + 1
   table.insert(threads, thread)
end

function init(args)
   tool = args[1] or "echo"
   prefix = args[2] or ""
   token = args[3] or ""
   n = 0
   sent = 0
   ok = 0
   bad = 0
   headers = {
      ["Content-Type"] = "application/json",
      ["Accept"] = "application/json, text/event-stream",
      ["MCP-Protocol-Version"] = "2025-11-25",
   }
   if token ~= "" then
      headers["Authorization"] = "Token " .. token
   end
end

function request()
   n = n + 1
   sent = sent + 1
   local arguments
   if prefix ~= "" then
      arguments = string.format('{"operationId":"%s-%d-%d","value":%d}', prefix, tid, n, n)
   else
      arguments = string.format('{"value":%d}', n)
   end
   return wrk.format("POST", nil, headers, string.format(
      '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%s","arguments":%s}}',
      n, tool, arguments))
end

function response(status, headers, body)
   if status == 200 and body:find('"result"%s*:') and not body:find('"isError"%s*:%s*true')
      and not body:find('"error"%s*:%s*{') then
      ok = ok + 1
   else
      bad = bad + 1
      if bad <= 3 then
         io.stderr:write(string.format("bad response %d: %s\n", status, body:sub(1, 300)))
      end
   end
end

function done(summary, latency, requests)
   local s, o, b = 0, 0, 0
   for _, thread in ipairs(threads) do
      s = s + thread:get("sent")
      o = o + thread:get("ok")
      b = b + thread:get("bad")
   end
   io.write(string.format("CHECKED sent=%d ok=%d bad=%d\n", s, o, b))
end
