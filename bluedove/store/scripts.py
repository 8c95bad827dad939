"""Lua scripts that make each catalogue change and each delivery write one atomic step.

Every key a script touches is passed in KEYS, and a call's keys share one hash tag, so each
call is one slot's: the same scripts run on one server and on a Redis Cluster. The key
layout is bluedove/store/keys.py's.
"""

# KEYS: the shard's catalogue hash, the shard's log, the queue's subscription set, the
# queue's gone mark. ARGV: sub id, catalogue json, max subs per queue, log maxlen.
# Returns the log id; GONE if the queue was deleted, LIMIT if it is full.
ADD_SUBSCRIPTION = """
if redis.call('EXISTS', KEYS[4]) == 1 then return {err = 'GONE'} end
if redis.call('SCARD', KEYS[3]) >= tonumber(ARGV[3]) then return {err = 'LIMIT'} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('SADD', KEYS[3], ARGV[1])
return redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 'op', 'add', 'id', ARGV[1], 'sub', ARGV[2])
"""

# Many subscriptions of one queue, all or none (POST /v1/subscriptions:batch). KEYS as in
# ADD_SUBSCRIPTION. ARGV: max subs per queue, log maxlen, then (sub id, catalogue json) pairs.
# Returns each one's log id, in order; GONE or LIMIT (nothing written) as in ADD_SUBSCRIPTION.
ADD_QUEUE_SUBSCRIPTIONS = """
if redis.call('EXISTS', KEYS[4]) == 1 then return {err = 'GONE'} end
local n = (#ARGV - 2) / 2
if redis.call('SCARD', KEYS[3]) + n > tonumber(ARGV[1]) then return {err = 'LIMIT'} end
local out = {}
for j = 1, n do
  local id, sub = ARGV[2 * j + 1], ARGV[2 * j + 2]
  redis.call('HSET', KEYS[1], id, sub)
  redis.call('SADD', KEYS[3], id)
  out[j] = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', 'op', 'add', 'id', id, 'sub', sub)
end
return out
"""

# KEYS: the queue's subscription set, the shard's catalogue hash, the shard's log.
# ARGV: sub id, log maxlen. Returns the log id, or false if the queue has no such subscription.
REMOVE_SUBSCRIPTION = """
if redis.call('SREM', KEYS[1], ARGV[1]) == 0 then return false end
redis.call('HDEL', KEYS[2], ARGV[1])
return redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[2], '*', 'op', 'remove', 'id', ARGV[1])
"""

# The catalogue's half of deleting a queue: mark it gone (no subscription can be added to it
# from now on), then remove and log every subscription it had. KEYS: the queue's subscription
# set, its gone mark, the shard's catalogue hash, the shard's log. ARGV: gone mark ttl s, log
# maxlen. Returns {last log id or '', sub ids...}.
DELETE_QUEUE_SUBSCRIPTIONS = """
redis.call('SET', KEYS[2], '1', 'EX', ARGV[1])
local ids = redis.call('SMEMBERS', KEYS[1])
local last = ''
for _, id in ipairs(ids) do
  redis.call('HDEL', KEYS[3], id)
  last = redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[2], '*', 'op', 'remove', 'id', id)
end
redis.call('DEL', KEYS[1])
local out = {last}
for _, id in ipairs(ids) do out[#out + 1] = id end
return out
"""

# The deliveries of a batch that fall in one slot (on one server: all of them). KEYS: for each
# delivery j, the queue's stream and its dedup mark for the message (KEYS[2j-1], KEYS[2j]).
# ARGV: n messages, then n pairs (message json, dedup ttl s), then per delivery j (message
# index 1..n, subscriptions json). A delivery whose mark is already set was written before
# (a retry, after a crash between two slots' writes or a lost answer): it is not written
# again, so each call is idempotent on its own. XADD NOMKSTREAM: a delivery to a queue
# deleted meanwhile is dropped, not resurrected. Returns {written, index of each message
# with a delivery new here...}.
DELIVER = """
local n = tonumber(ARGV[1])
local base = 2 * n + 2
local written = 0
local new = {}
for j = 1, #KEYS / 2 do
  local at = base + 2 * (j - 1)
  local mi = tonumber(ARGV[at])
  if redis.call('SET', KEYS[2 * j], '1', 'NX', 'EX', ARGV[2 * mi + 1]) then
    if redis.call('XADD', KEYS[2 * j - 1], 'NOMKSTREAM', '*', 'm', ARGV[2 * mi], 's', ARGV[at + 1]) then
      written = written + 1
      new[mi] = true
    end
  end
end
local out = {written}
for mi in pairs(new) do out[#out + 1] = mi end
return out
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
