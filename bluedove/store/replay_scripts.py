"""The Lua scripts of replay: the live deliveries that meet a replay at its seam, the replayed
deliveries, and a replay's lease and progress (bluedove/store/replays.py says what each is for).

A replay mark (bluedove/store/keys.py `replay_mark`: the queue, the subscription, the message)
is set with SET NX by whichever writes the message to the subscription first, the replay or a
live delivery made while the subscription is new; the other then leaves the subscription out.
So a message matched both live and from the log reaches the subscription once.
"""

from __future__ import annotations

from bluedove.store.keys import WAKE
from bluedove.store.scripts import WAKE_AND_ANSWER, WRITES

# Append a chunk to a space's log shard, trimming what is older than the retention (MINID ~:
# whole nodes of the stream at once, so a few entries past it may stay a little longer; a
# replay reads past them by time). KEYS: the shard. ARGV: the oldest id to keep, then field,
# value pairs. In a script so that it goes out in the pipeline of the batch's delivery calls
# (one round trip), and waits for the replicas with them when the store promises that.
LOG_APPEND = """
return redis.call('XADD', KEYS[1], 'MINID', '~', ARGV[1], '*', unpack(ARGV, 2))
"""

# Live deliveries of one slot, some of whose subscriptions are replaying (a matcher's batch
# while a replay's seam is open). KEYS, per delivery: the queue's stream, its dedup mark for
# the message, its hash, then one replay mark per replaying subscription. ARGV: n messages,
# the default cap, the replay marks' ttl s, then n pairs (message json, dedup ttl s), then per
# delivery: message index 1..n, subscriptions json, c, and the c replaying subscriptions' ids.
# As DELIVER: a delivery whose dedup mark is set was decided before (a retry); a queue at its
# cap of deliveries not yet acked (XLEN - kept: bluedove/store/kept_scripts.py) refuses it
# (counted in `dropped`); a queue deleted meanwhile is not made again. A
# replaying subscription whose mark was set already (the replay delivered the message to it)
# is left out of the delivery, which is not written when none is left. Returns {written,
# dropped, index of each message with a delivery new here...}.
SEAM_DELIVER = WRITES + """
local n = tonumber(ARGV[1])
local dcap, mttl = tonumber(ARGV[2]), ARGV[3]
local a, k = 2 * n + 4, 1
while a <= #ARGV do
  local mi, c = tonumber(ARGV[a]), tonumber(ARGV[a + 2])
  local s, h = KEYS[k], KEYS[k + 2]
  if redis.call('SET', KEYS[k + 1], '1', 'NX', 'EX', ARGV[2 * mi + 3]) then
    local drop = {}
    for i = 1, c do
      if not redis.call('SET', KEYS[k + 2 + i], '1', 'NX', 'EX', mttl) then drop[ARGV[a + 2 + i]] = true end
    end
    local keep = {}
    for _, id in ipairs(cjson.decode(ARGV[a + 1])) do
      if not drop[id] then keep[#keep + 1] = id end
    end
    if #keep > 0 then
      local v = redis.call('HMGET', h, 'max_undelivered', 'kept')
      local cap = tonumber(v[1]) or dcap
      if cap > 0 and redis.call('XLEN', s) - (tonumber(v[2]) or 0) >= cap then
        redis.call('HINCRBY', h, 'dropped', 1)
        dropped = dropped + 1
      elseif redis.call('XADD', s, 'NOMKSTREAM', '*', 'm', ARGV[2 * mi + 2], 's', cjson.encode(keep)) then
        wrote(s, mi)
      end
    end
  end
  k = k + 3 + c
  a = a + 3 + c
end
""" + WAKE_AND_ANSWER

# Replayed deliveries to one subscription's queue. KEYS: the queue's stream, its hash, then one
# replay mark per message. ARGV: the default cap, the marks' ttl s, the subscriptions json (the
# one subscription), then each message's json. A message whose mark is set (delivered live, or
# by this replay before a restart or a wait) is skipped. A queue at its cap (XLEN - kept, as for
# live deliveries) stops the call before the first message it has no room for, whose mark stays
# unset: the replay waits for the consumer and writes it later, nothing is dropped.
# Returns {written, 1 if it stopped at the cap else 0}.
REPLAY_DELIVER = """
local v = redis.call('HMGET', KEYS[2], 'max_undelivered', 'kept')
local cap, kept = tonumber(v[1]) or tonumber(ARGV[1]), tonumber(v[2]) or 0
local written, full = 0, 0
for i = 3, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    if cap > 0 and redis.call('XLEN', KEYS[1]) - kept >= cap then
      full = 1
      break
    end
    redis.call('SET', KEYS[i], '1', 'EX', ARGV[2])
    if redis.call('XADD', KEYS[1], 'NOMKSTREAM', '*', 'm', ARGV[i + 1], 's', ARGV[3]) then
      written = written + 1
    end
  end
end
if written > 0 then redis.pcall('PUBLISH', '""" + WAKE + """', KEYS[1]) end
return {written, full}
"""

# Take (or keep) a replay's lease. KEYS: the replay's hash. ARGV: the taker, now ms, lease ms.
# Returns 1 when the taker holds it now (it was free, expired, or the taker's), 0 when another
# holds it, -1 when there is no such replay or it is done.
REPLAY_LEASE = """
local v = redis.call('HMGET', KEYS[1], 'queue', 'done', 'lease', 'lease_until')
if not v[1] or v[2] == '1' then return -1 end
if v[3] and v[3] ~= ARGV[1] and tonumber(v[4] or '0') > tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'lease', ARGV[1], 'lease_until', tonumber(ARGV[2]) + tonumber(ARGV[3]))
return 1
"""

# Record a replay's progress, by the lease holder only. KEYS: the replay's hash, the space's set
# of replays under way. ARGV: the holder, the new position, deliveries written, '1' when done,
# the subscription id. Returns 1 recorded, 0 not the holder (another took the lease over).
REPLAY_ADVANCE = """
if redis.call('HGET', KEYS[1], 'lease') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'pos', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'delivered', ARGV[3])
if ARGV[4] == '1' then
  redis.call('HSET', KEYS[1], 'done', '1')
  redis.call('HDEL', KEYS[1], 'lease', 'lease_until')
  redis.call('SREM', KEYS[2], ARGV[5])
end
return 1
"""
