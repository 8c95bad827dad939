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
