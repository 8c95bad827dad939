"""Lua scripts that make each catalogue change and each delivery batch one atomic step.

Key layout (prefix `bd:`):
  bd:q:<queue>        hash   token (sha256 hex), created
  bd:tok:<sha256>     string the queue a token belongs to
  bd:q:<queue>:subs   set    subscription ids of the queue
  bd:q:<queue>:s      stream deliveries; consumer group `g`
  bd:subs             hash   subscription id -> catalogue JSON (system of record)
  bd:catlog           stream catalogue changes (op add|remove, id, sub) for matchers to tail
  bd:dd:<message id>  string dedup mark of a published message, expires after the window
  bd:table            string the segment table JSON
"""

# KEYS: none (single Redis). ARGV: sub id, queue, catalogue json, max subs per queue, log maxlen
ADD_SUBSCRIPTION = """
local qkey = 'bd:q:' .. ARGV[2]
if redis.call('EXISTS', qkey) == 0 then return {err = 'NOQUEUE'} end
local skey = qkey .. ':subs'
if redis.call('SCARD', skey) >= tonumber(ARGV[4]) then return {err = 'LIMIT'} end
redis.call('HSET', 'bd:subs', ARGV[1], ARGV[3])
redis.call('SADD', skey, ARGV[1])
return redis.call('XADD', 'bd:catlog', 'MAXLEN', '~', ARGV[5], '*', 'op', 'add', 'id', ARGV[1], 'sub', ARGV[3])
"""

# ARGV: sub id, queue, log maxlen. Returns the log id, or false if no such subscription of that queue.
REMOVE_SUBSCRIPTION = """
local skey = 'bd:q:' .. ARGV[2] .. ':subs'
if redis.call('SREM', skey, ARGV[1]) == 0 then return false end
redis.call('HDEL', 'bd:subs', ARGV[1])
return redis.call('XADD', 'bd:catlog', 'MAXLEN', '~', ARGV[3], '*', 'op', 'remove', 'id', ARGV[1])
"""

# ARGV: queue, log maxlen. Deletes the queue, its stream and its subscriptions; returns
# {last log id or '', sub ids...}.
DELETE_QUEUE = """
local qkey = 'bd:q:' .. ARGV[1]
local skey = qkey .. ':subs'
local ids = redis.call('SMEMBERS', skey)
local digest = redis.call('HGET', qkey, 'token')
if digest then redis.call('DEL', 'bd:tok:' .. digest) end
local last = ''
for _, id in ipairs(ids) do
  redis.call('HDEL', 'bd:subs', id)
  last = redis.call('XADD', 'bd:catlog', 'MAXLEN', '~', ARGV[2], '*', 'op', 'remove', 'id', id)
end
redis.call('DEL', qkey, skey, qkey .. ':s')
local out = {last}
for _, id in ipairs(ids) do out[#out + 1] = id end
return out
"""

# One matcher batch. ARGV: n messages, then n triples (message id, message json, dedup ttl s),
# then triples (queue, message index 1..n, subscriptions json). A message whose dedup mark is
# already set was delivered before (a retry or a republished id): none of its deliveries
# are written again. The script is atomic, so a message's deliveries are all stored or none.
# XADD NOMKSTREAM: a delivery to a queue deleted meanwhile is dropped, not resurrected.
DELIVER = """
local n = tonumber(ARGV[1])
local fresh = {}
local nfresh = 0
for i = 1, n do
  if redis.call('SET', 'bd:dd:' .. ARGV[3 * i - 1], '1', 'NX', 'EX', ARGV[3 * i + 1]) then
    fresh[i] = true
    nfresh = nfresh + 1
  end
end
local written = 0
for j = 2 + 3 * n, #ARGV, 3 do
  local mi = tonumber(ARGV[j + 1])
  if fresh[mi] then
    if redis.call('XADD', 'bd:q:' .. ARGV[j] .. ':s', 'NOMKSTREAM', '*', 'm', ARGV[3 * mi], 's', ARGV[j + 2]) then
      written = written + 1
    end
  end
end
return {nfresh, written}
"""

# A queue's next deliveries in one step, as the REST body. KEYS: the queue's stream, the
# queue's hash. ARGV: group, consumer, visibility timeout ms, max n, token digest ('' when the
# caller checked the token itself). A wrong digest (or a queue gone) returns false, so the token
# check costs no round trip of its own. Deliveries whose visibility timeout passed come first
# (following XAUTOCLAIM's cursor, which looks at a bounded number of pending entries per call),
# then new ones (XREADGROUP, never blocking here). Returns {n, '{"messages":[...]}', r}, r of the
# n handed out again after their visibility timeout (redeliveries): each stored
# message object gains "subscriptions" and "receipt", spliced as text. One string, because
# handing the entries back as Lua tables cost redis-server ~14 µs of CPU per delivery, more than
# reading them (docs/benchmarks.md, "Delivery"). Entries deleted meanwhile (nil in XAUTOCLAIM's
# reply on Redis 6.2) are skipped.
POLL = """
if ARGV[5] ~= '' and redis.call('HGET', KEYS[2], 'token') ~= ARGV[5] then return false end
local n = tonumber(ARGV[4])
local out = {}
local got = 0
local function add(e)
  local f = e[2]
  if type(f) ~= 'table' then return end
  local m, s
  for i = 1, #f - 1, 2 do
    if f[i] == 'm' then m = f[i + 1] elseif f[i] == 's' then s = f[i + 1] end
  end
  if not m or not s then return end
  -- the object without its closing brace: the stored JSON is compact, else trim around it
  local head
  local last, before = string.byte(m, -1), string.byte(m, -2)
  if last == 125 and before ~= 32 and before ~= 9 and before ~= 10 and before ~= 13 then
    head = string.sub(m, 1, -2)
  else
    head = string.gsub(m, '%s*}%s*$', '')
  end
  if got > 0 then out[#out + 1] = ',' end
  out[#out + 1] = head
  out[#out + 1] = string.byte(head, -1) == 123 and '"subscriptions":' or ',"subscriptions":'
  out[#out + 1] = s
  out[#out + 1] = ',"receipt":"'
  out[#out + 1] = e[1]
  out[#out + 1] = '"}'
  got = got + 1
end
local cursor = '0-0'
for _ = 1, 16 do
  local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], cursor, 'COUNT', n - got)
  cursor = r[1]
  for _, e in ipairs(r[2]) do
    if type(e) == 'table' then add(e) end
  end
  if cursor == '0-0' or got >= n then break end
end
local reclaimed = got
if got < n then
  local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', n - got, 'STREAMS', KEYS[1], '>')
  if type(r) == 'table' then
    for _, e in ipairs(r[1][2]) do add(e) end
  end
end
return {got, '{"messages":[' .. table.concat(out) .. ']}', reclaimed}
"""

# Ack: remove deliveries from the pending list and the stream in one call. KEYS: the queue's
# stream, the queue's hash. ARGV: group, token digest ('' when the caller checked the token),
# receipts... A wrong digest (or a queue gone) returns false. Returns how many were pending.
# The receipts go to XACK and XDEL in slices: unpack() of more than ~8,000 values fails.
ACK = """
if ARGV[2] ~= '' and redis.call('HGET', KEYS[2], 'token') ~= ARGV[2] then return false end
local acked = 0
for i = 3, #ARGV, 1000 do
  local j = math.min(i + 999, #ARGV)
  acked = acked + redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, i, j))
  redis.call('XDEL', KEYS[1], unpack(ARGV, i, j))
end
return acked
"""

# KEYS: bd:table. ARGV: expected epoch (0 = no table yet), new table JSON.
# Compare-and-set: one table change per epoch wins, however many matchers propose one.
PUT_TABLE_IF = """
local cur = redis.call('GET', KEYS[1])
local epoch = 0
if cur then epoch = tonumber(cjson.decode(cur)['epoch']) end
if epoch ~= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
"""
