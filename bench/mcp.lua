-- wrk script: one MCP `tools/call` per POST (stateless Streamable HTTP, JSON responses,
-- protocol 2025-11-25), and every response checked for what it answers, not only its status.
-- Arguments (after --): TOOL PREFIX TOKEN
--   PREFIX "":  arguments {"value": n}
--   PREFIX set: arguments {"operationId": "<PREFIX>-<thread>-<n>", "value": n}, a fresh key per call
--   TOKEN set:  "Authorization: Token TOKEN" (DRF token); empty: anonymous
-- Request n of a thread has the JSON-RPC id n and the value n. A response is correct when:
-- its status is 200; it has a JSON-RPC result and no error; the result is not "isError": true;
-- its id is one this thread sent and has not had answered yet (no answer twice, none made up);
-- its structuredContent is an object whose "value" is that id, and its text content says the
-- same value; and with PREFIX set, the result names the call's own key and is not a replay.
-- At the end it prints one line: "CHECKED sent=S ok=O bad=B", where ok counts the correct
-- responses and bad every other; the first three wrong ones go to stderr with the reason.

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
   pending = {}
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
   pending[n] = true
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

-- nil when the response is a correct answer to one of this thread's requests, else why not
function judge(status, body)
   if status ~= 200 then
      return "status " .. status
   end
   local result = body:match('"result"%s*:%s*(%b{})')
   if not result then
      return "no result"
   end
   local outer = body:gsub('"result"%s*:%s*%b{}', '', 1)
   if outer:find('"error"%s*:') then
      return "a JSON-RPC error"
   end
   if result:find('"isError"%s*:%s*true') then
      return "isError"
   end
   local id = tonumber(outer:match('"id"%s*:%s*(%d+)'))
   if not id or not pending[id] then
      return "id " .. tostring(id) .. " not awaiting an answer"
   end
   pending[id] = nil
   local structured = result:match('"structuredContent"%s*:%s*(%b{})')
   if not structured then
      return "no structuredContent"
   end
   if tonumber(structured:match('"value"%s*:%s*(%-?%d+)')) ~= id then
      return "structuredContent's value is not " .. id
   end
   -- the text content: the same object, JSON in a JSON string (its quotes escaped)
   if tonumber(result:match('\\"value\\"%s*:%s*(%-?%d+)')) ~= id then
      return "the text content's value is not " .. id
   end
   if prefix ~= "" then
      local key = string.format('"%s-%d-%d"', prefix, tid, id)
      if not result:find(key, 1, true) then
         return "the result does not name the key " .. key
      end
      if result:find('"replayed"%s*:%s*true') then
         return "a replay for a fresh key"
      end
   end
   return nil
end

function response(status, headers, body)
   local problem = judge(status, body)
   if problem == nil then
      ok = ok + 1
   else
      bad = bad + 1
      if bad <= 3 then
         io.stderr:write(string.format("bad response (%s) %d: %s\n", problem, status,
                                       body:sub(1, 300)))
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
