"""Lua scripts that make each catalogue change and each delivery write one atomic step.

Every key a script touches is passed in KEYS, and a call's keys share one hash tag, so each
call is one slot's: the same scripts run on one server and on a Redis Cluster. The key
layout is bluedove/store/keys.py's.
"""

from bluedove.store.kept_scripts import KEPT
from bluedove.store.keys import WAKE

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

# A subscription's filter changed in place (PUT /v1/subscriptions/{id}): the catalogue's entry
# and its log entry in one step, so that a reader of the log sees the old version, then the
# new one, never both nor neither. KEYS: the queue's subscription set, the shard's catalogue
# hash, the shard's log, the queue's gone mark. ARGV: sub id, catalogue json, log maxlen.
# Returns {log id, the previous catalogue json}; false if the queue has no such subscription;
# GONE if the queue was deleted.
REPLACE_SUBSCRIPTION = """
if redis.call('EXISTS', KEYS[4]) == 1 then return {err = 'GONE'} end
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return false end
local old = redis.call('HGET', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return {redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[3], '*', 'op', 'replace', 'id', ARGV[1], 'sub', ARGV[2]),
        old}
"""

# The catalogue's half of deleting a queue, one bounded step per call: mark it gone (no
# subscription can be added to it from now on), then remove and log those of the given ids it
# still has (the caller passes a slice of its subscriptions per call, so that no call holds
# the server for long). KEYS: the queue's subscription set, its gone mark, the shard's
# catalogue hash, the shard's log. ARGV: gone mark ttl s, log maxlen, sub ids... Returns the
# ids this call removed.
DELETE_QUEUE_SUBSCRIPTIONS = """
redis.call('SET', KEYS[2], '1', 'EX', ARGV[1])
local out = {}
for i = 3, #ARGV do
  if redis.call('SREM', KEYS[1], ARGV[i]) == 1 then
    redis.call('HDEL', KEYS[3], ARGV[i])
    redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[2], '*', 'op', 'remove', 'id', ARGV[i])
    out[#out + 1] = ARGV[i]
  end
end
return out
"""

# What a delivery script (DELIVER, and SEAM_DELIVER in bluedove/store/replay_scripts.py) counts
# as it writes: `wrote(stream, message index)` after each XADD that wrote. WAKE_AND_ANSWER ends
# it: the streams written to named in one PUBLISH on the wake-up channel, then {written,
# dropped, index of each message with a delivery new here...}.
WRITES = """
local written, dropped = 0, 0
local new, woken, wake = {}, {}, {}
local function wrote(s, mi)
  written = written + 1
  new[mi] = true
  if not woken[s] then
    woken[s] = true
    wake[#wake + 1] = s
  end
end
"""
WAKE_AND_ANSWER = """
if #wake > 0 then redis.pcall('PUBLISH', '""" + WAKE + """', table.concat(wake, ' ')) end
local out = {written, dropped}
for mi in pairs(new) do out[#out + 1] = mi end
return out
"""

# The deliveries of a batch that fall in one slot (on one server: all of them). KEYS: for each
# delivery j, the queue's stream, its dedup mark for the message and the queue's hash
# (KEYS[3j-2], KEYS[3j-1], KEYS[3j]). ARGV: n messages, the default cap and retention (s) of a
# queue whose hash names none, the consumer group, then n pairs (message json, dedup ttl s),
# then per delivery j (message index 1..n, subscriptions json). A delivery whose mark is already set was decided
# before (a retry, after a crash between two slots' writes or a lost answer): it is not
# written again, so each call is idempotent on its own. A queue holding its cap of
# undelivered (not yet acked) deliveries refuses the delivery (counted in its hash's
# `dropped`; the mark stays, so a retry refuses it again rather than counting it twice);
# a queue with a retention first acks and deletes up to 100 entries older than it (counted
# in `expired`; acked too, so that none stays in the pending list, as XADD MINID would leave
# it on Redis 6.2), and a queue that keeps acked deliveries deletes the acked ones older than
# it keeps them (up to 100 looked at; its cap counts XLEN - kept:
# bluedove/store/kept_scripts.py). XADD NOMKSTREAM: a delivery to a queue deleted meanwhile is
# dropped, not resurrected. The streams written to are named in one PUBLISH on the wake-up channel, for
# the polls parked on them (bluedove/store/wakeups.py; a refused PUBLISH is ignored, the writes
# stand). Returns {written, dropped, index of
# each message with a delivery new here...}.
DELIVER = KEPT + WRITES + """
local n = tonumber(ARGV[1])
local dcap, dret = tonumber(ARGV[2]), tonumber(ARGV[3])
local base = 2 * n + 5
local lim = {}
for j = 1, #KEYS / 3 do
  local s, h = KEYS[3 * j - 2], KEYS[3 * j]
  local at = base + 2 * (j - 1)
  local mi = tonumber(ARGV[at])
  if redis.call('SET', KEYS[3 * j - 1], '1', 'NX', 'EX', ARGV[2 * mi + 4]) then
    local l = lim[s]
    if not l then
      local v = redis.call('HMGET', h, 'max_undelivered', 'retention_s', 'retain_acked_s')
      local keep = tonumber(v[3]) or 0
      l = {tonumber(v[1]) or dcap, tonumber(v[2]) or dret, 0}
      lim[s] = l
      if l[2] > 0 then expire(s, h, ARGV[4], now_ms() - l[2] * 1000, 100, true, keep > 0) end
      if keep > 0 then
        trim_kept(s, h, ARGV[4], keep, 100)
        l[3] = tonumber(redis.call('HGET', h, 'kept')) or 0
      end
    end
    if l[1] > 0 and redis.call('XLEN', s) - l[3] >= l[1] then
      redis.call('HINCRBY', h, 'dropped', 1)
      dropped = dropped + 1
    else
      if redis.call('XADD', s, 'NOMKSTREAM', '*', 'm', ARGV[2 * mi + 3], 's', ARGV[at + 1]) then
        wrote(s, mi)
      end
    end
  end
end
""" + WAKE_AND_ANSWER

# Step two of dead-lettering (step one is POLL's): one delivery into the dead-letter queue,
# on that queue's slot. KEYS: the dead-letter queue's stream, its hash, the move's mark (the
# source queue and the delivery's id there: a move repeated after a crash writes nothing).
# ARGV: message json, subscriptions json, mark ttl s, default cap. The dead-letter queue's
# own cap holds (its retention, at its polls), counting what it has not acked (XLEN - kept:
# bluedove/store/kept_scripts.py); a write wakes the polls parked on it, as DELIVER's do.
# Returns 1 written, 0 already moved (or the queue gone), -1 refused by the cap.
DEAD_LETTER = """
if not redis.call('SET', KEYS[3], '1', 'NX', 'EX', ARGV[3]) then return 0 end
local v = redis.call('HMGET', KEYS[2], 'max_undelivered', 'kept')
local cap = tonumber(v[1]) or tonumber(ARGV[4])
if cap > 0 and redis.call('XLEN', KEYS[1]) - (tonumber(v[2]) or 0) >= cap then
  if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('HINCRBY', KEYS[2], 'dropped', 1) end
  return -1
end
if redis.call('XADD', KEYS[1], 'NOMKSTREAM', '*', 'm', ARGV[1], 's', ARGV[2]) then
  redis.pcall('PUBLISH', '""" + WAKE + """', KEYS[1])
  return 1
end
return 0
"""

# A queue's next deliveries in one step, as the REST body. KEYS: the queue's stream, the
# queue's hash, its dead-letter outbox. ARGV: group, consumer, visibility timeout ms, max n,
# token digest ('' when the caller checked the token itself), default retention s, the tag
# its receipts end with (bluedove/store/ids.py). A wrong digest (or a queue gone) returns
# false, so the token check costs no round trip of its own. Deliveries whose visibility
# timeout passed come first (following XAUTOCLAIM's cursor, which looks at a bounded number of
# pending entries per call), then new ones (XREADGROUP, never blocking here). Returns {n,
# '{"messages":[...]}', r, ids, pending}, r of the n handed out again after their visibility
# timeout (redeliveries), ids their entry ids joined by ',' (for the caller's slow path when
# the body cannot be rendered), pending (when n is 0) how many are handed out and unacked,
# whose timeouts a parked poll must look out for, as no wake-up announces them. In the body
# each stored message object gains "subscriptions" and "receipt" (the entry id and the tag),
# spliced as text. One string, because handing the entries back as Lua tables cost
# redis-server ~14 µs of CPU per delivery, more than reading them (docs/benchmarks.md,
# "Delivery"). Entries deleted meanwhile (nil in XAUTOCLAIM's reply on Redis 6.2) are skipped.
#
# Retention (the hash's retention_s, else ARGV[6]): entries older than it are first acked and
# deleted (up to 1,000 a call, counted in the hash's `expired`), and any older one left is
# never handed out. A queue that keeps acked deliveries then deletes the acked ones older than
# it keeps them (up to 1,000 looked at: bluedove/store/kept_scripts.py). Dead-lettering (the
# hash's dl_queue and dl_max): expired unacked entries are then found with XPENDING instead of
# XAUTOCLAIM; one handed out dl_max times already moves, in this call, to the queue's outbox
# (KEYS[3], same slot: step one of the move) and leaves the queue (counted in
# `dead_lettered`); the others are reclaimed with XCLAIM. The reply then also carries the
# outbox's length and the dead-letter queue, for step two (DEAD_LETTER, on that queue's slot).
POLL = KEPT + """
local h = redis.call('HMGET', KEYS[2], 'token', 'retention_s', 'dl_queue', 'dl_max', 'retain_acked_s')
if ARGV[5] ~= '' and h[1] ~= ARGV[5] then return false end
local n = tonumber(ARGV[4])
local out, ids = {}, {}
local got = 0
local tail = (ARGV[7] or '') .. '"}'
local ret = tonumber(h[2]) or tonumber(ARGV[6] or '0')
local keep = tonumber(h[5]) or 0
local cutoff
if ret > 0 then
  cutoff = now_ms() - ret * 1000
  expire(KEYS[1], KEYS[2], ARGV[1], cutoff, 1000, h[1], keep > 0)
end
if keep > 0 then trim_kept(KEYS[1], KEYS[2], ARGV[1], keep, 1000) end
local function add(e)
  local f = e[2]
  if type(f) ~= 'table' then return end
  if cutoff and tonumber(string.match(e[1], '^(%d+)')) < cutoff then return end
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
  out[#out + 1] = tail
  got = got + 1
  ids[got] = e[1]
end
local dlq, dlmax = h[3], tonumber(h[4])
if dlq and dlmax and KEYS[3] then
  local start, moved = '-', 0
  for _ = 1, 16 do
    local p = redis.call('XPENDING', KEYS[1], ARGV[1], 'IDLE', ARGV[3], start, '+', n - got)
    for _, x in ipairs(p) do
      local id = x[1]
      local e = redis.call('XRANGE', KEYS[1], id, id)[1]
      if not e then
        redis.call('XACK', KEYS[1], ARGV[1], id)  -- deleted under its pending entry: forget it
      elseif tonumber(x[4]) >= dlmax then
        redis.call('XADD', KEYS[3], '*', 'src', id, unpack(e[2]))
        redis.call('XACK', KEYS[1], ARGV[1], id)
        redis.call('XDEL', KEYS[1], id)
        moved = moved + 1
      else
        for _, c in ipairs(redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], id)) do
          if type(c) == 'table' then add(c) end
        end
      end
      start = '(' .. id
    end
    if #p == 0 or got >= n then break end
  end
  if moved > 0 and h[1] then redis.call('HINCRBY', KEYS[2], 'dead_lettered', moved) end
else
  local cursor = '0-0'
  for _ = 1, 16 do
    local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], cursor, 'COUNT', n - got)
    cursor = r[1]
    for _, e in ipairs(r[2]) do
      if type(e) == 'table' then add(e) end
    end
    if cursor == '0-0' or got >= n then break end
  end
end
local reclaimed = got
if got < n then
  local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', n - got, 'STREAMS', KEYS[1], '>')
  if type(r) == 'table' then
    for _, e in ipairs(r[1][2]) do add(e) end
  end
end
local body = '{"messages":[' .. table.concat(out) .. ']}'
local handed = table.concat(ids, ',')
local pending = 0
if got == 0 then pending = redis.call('XPENDING', KEYS[1], ARGV[1])[1] end
if dlq and dlmax and KEYS[3] then return {got, body, reclaimed, handed, pending, redis.call('XLEN', KEYS[3]), dlq} end
return {got, body, reclaimed, handed, pending}
"""

# Set aside deliveries a poll handed out that cannot be rendered (their stored text is not
# UTF-8, or not JSON a reader takes: written before publishing refused such messages). KEYS:
# the queue's stream, its hash, its dead-letter outbox. ARGV: group, entry ids... Each goes
# to the outbox when the queue has a dead-letter queue (step one of a move, as in POLL;
# counted in `dead_lettered`), and leaves the queue either way. Entries gone meanwhile are
# skipped; one acked meanwhile on a queue that keeps acked deliveries leaves `kept` too.
# Returns {removed, moved, the dead-letter queue or false, the outbox's length}.
SET_ASIDE = KEPT + """
local h = redis.call('HMGET', KEYS[2], 'token', 'dl_queue', 'retain_acked_s')
local removed, moved, unkept = 0, 0, 0
local last
if (tonumber(h[3]) or 0) > 0 then last = last_delivered(KEYS[1], ARGV[1]) end
for i = 2, #ARGV do
  local id = ARGV[i]
  local e = redis.call('XRANGE', KEYS[1], id, id)[1]
  if e then
    if h[2] then
      redis.call('XADD', KEYS[3], '*', 'src', id, unpack(e[2]))
      moved = moved + 1
    end
    if redis.call('XACK', KEYS[1], ARGV[1], id) == 0 and last and id_le(id, last) then unkept = unkept + 1 end
    redis.call('XDEL', KEYS[1], id)
    removed = removed + 1
  end
end
if moved > 0 and h[1] then redis.call('HINCRBY', KEYS[2], 'dead_lettered', moved) end
if unkept > 0 then redis.call('HINCRBY', KEYS[2], 'kept', -unkept) end
return {removed, moved, h[2] or false, redis.call('XLEN', KEYS[3])}
"""

# Ack: remove deliveries from the pending list and the stream in one call. KEYS: the queue's
# stream, the queue's hash. ARGV: group, token digest ('' when the caller checked the token),
# receipts... A wrong digest (or a queue gone) returns false. Returns how many were pending.
# The receipts go to XACK and XDEL in slices: unpack() of more than ~8,000 values fails. A
# queue that keeps acked deliveries keeps the entries (no XDEL) and counts them in `kept`
# (bluedove/store/kept_scripts.py).
ACK = """
local h = redis.call('HMGET', KEYS[2], 'token', 'retain_acked_s')
if ARGV[2] ~= '' and h[1] ~= ARGV[2] then return false end
local keeps = (tonumber(h[2]) or 0) > 0
local acked = 0
for i = 3, #ARGV, 1000 do
  local j = math.min(i + 999, #ARGV)
  acked = acked + redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, i, j))
  if not keeps then redis.call('XDEL', KEYS[1], unpack(ARGV, i, j)) end
end
if keeps and acked > 0 then redis.call('HINCRBY', KEYS[2], 'kept', acked) end
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
