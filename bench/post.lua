-- wrk script: POST a tool input per request.
-- Arguments (after --): MODE PREFIX TOKEN
--   MODE "fresh":  a new key per request, built from PREFIX, the thread's id and a counter,
--                  in the body ("operationId") and in the Idempotency-Key header
--   MODE "replay": the same key and body every time (PREFIX is the key)
-- Every request carries "Authorization: Token TOKEN".

local counter = 1

function setup(thread)
   thread:set("tid", counter)
   counter = counter + 1
end

function init(args)
   mode = args[1] or "fresh"
   prefix = args[2] or "k"
   token = args[3] or ""
   n = 0
   headers = {
      ["Content-Type"] = "application/json",
      ["Authorization"] = "Token " .. token,
   }
end

-- The request is formatted anew in both modes, so the client's work is the same.
function request()
   n = n + 1
   local key = prefix
   if mode == "replay" then
      n = 1
   else
      key = string.format("%s-%d-%d", prefix, tid, n)
   end
   headers["Idempotency-Key"] = key
   return wrk.format("POST", nil, headers,
                     string.format('{"operationId":"%s","value":%d}', key, n))
end
