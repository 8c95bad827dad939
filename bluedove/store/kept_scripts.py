"""The Lua of queues that keep acked deliveries (`retain_acked_s`, docs/api.md "Queues"): the
functions the delivery, poll and ack scripts share (bluedove/store/scripts.py), and SEEK.

Such a queue's ack only acks (XACK): the entry stays in the stream until it is older than
`retain_acked_s`, so that a seek can hand it out again. An entry of the stream is then in one
of three states, all read from the consumer group: *waiting* (after the group's
last-delivered id), *pending* (handed out, not acked: in the group's pending list) or *acked*
(neither). The cap counts what is not yet acked, which XLEN no longer is: the hash's `kept`
counts the acked entries, and XLEN - kept is the count. Every step that changes an entry's
state keeps it exact in the same script: an ack adds what XACK acked; deleting entries (their
retention, their age once acked, a dead-letter move, setting one aside) takes off those that
were acked; a seek counts it anew. Counting the waiting entries instead (from the
last-delivered id, plus the pending list's length) is O(entries) on Redis 6.2, which has no
group lag; the counter costs one HGET beside the XLEN each write already does. A queue that
keeps nothing has no `kept` (0): its acks delete, as they always did.

Acked entries older than `retain_acked_s` are deleted in bounded slices at the queue's writes
and polls (`trim_kept`), from where the last slice stopped (the hash's `trim_at`), so that old
entries still pending never hold the trim up.
"""

from bluedove.store.keys import WAKE

# Stream ids as numbers ({ms, seq}: exact for ms, and for every seq a stream really holds), the
# server's clock (read once a call), the group's last-delivered id, and the two deletions.
KEPT = """
local function id_parts(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function id_le(a, b)
  local am, as = id_parts(a)
  local bm, bs = id_parts(b)
  return am < bm or (am == bm and as <= bs)
end
local clock
local function now_ms()
  if not clock then
    local t = redis.call('TIME')
    clock = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return clock
end
local function last_delivered(s, group)
  local groups = redis.pcall('XINFO', 'GROUPS', s)
  if type(groups) ~= 'table' or groups.err then return '0-0' end
  for _, g in ipairs(groups) do
    local name, last
    for i = 1, #g - 1, 2 do
      if g[i] == 'name' then name = g[i + 1] elseif g[i] == 'last-delivered-id' then last = g[i + 1] end
    end
    if name == group then return last end
  end
  return '0-0'
end
-- Ack and delete up to `most` entries stored before `cutoff` (ms), counted in the hash's
-- `expired` when `counted`; of a queue that `keeps` acked entries, those that were acked
-- (up to the last-delivered id, and not pending: XACK did not count them) leave `kept`.
local function expire(s, h, group, cutoff, most, counted, keeps)
  local old = redis.call('XRANGE', s, '-', tostring(cutoff - 1), 'COUNT', most)
  if #old == 0 then return end
  local ids = {}
  for i, e in ipairs(old) do ids[i] = e[1] end
  local acked = -redis.call('XACK', s, group, unpack(ids))
  redis.call('XDEL', s, unpack(ids))
  if counted then redis.call('HINCRBY', h, 'expired', #ids) end
  if keeps then
    local last = last_delivered(s, group)
    for _, id in ipairs(ids) do
      if id_le(id, last) then acked = acked + 1 end
    end
    if acked > 0 then redis.call('HINCRBY', h, 'kept', -acked) end
  end
end
-- Delete the acked entries stored more than keep_s ago: up to `most` entries looked at, from
-- the hash's `trim_at` (where the last call stopped; the start once a call reaches the end).
local function trim_kept(s, h, group, keep_s, most)
  local old = now_ms() - keep_s * 1000
  local upto = last_delivered(s, group)
  if id_parts(upto) >= old then upto = tostring(old - 1) end
  local got = redis.call('XRANGE', s, redis.call('HGET', h, 'trim_at') or '-', upto, 'COUNT', most)
  if #got < most then redis.call('HDEL', h, 'trim_at') else redis.call('HSET', h, 'trim_at', '(' .. got[#got][1]) end
  if #got == 0 then return end
  local pending, ids = {}, {}
  for _, p in ipairs(redis.call('XPENDING', s, group, got[1][1], got[#got][1], #got)) do pending[p[1]] = true end
  for _, e in ipairs(got) do
    if not pending[e[1]] then ids[#ids + 1] = e[1] end
  end
  if #ids > 0 then
    redis.call('XDEL', s, unpack(ids))
    redis.call('HINCRBY', h, 'kept', -#ids)
  end
end
"""

# Seek a queue that keeps acked deliveries: every entry from the cut on becomes waiting again
# (handed out once more, acked or not), every one before it acked. KEYS: the queue's stream, its
# hash. ARGV: group, token digest ('' when the caller checked the token), the cut (an entry id:
# `<ms>-0` for a time), the id just before it, the default retention s, entries read a slice.
#
# One script, so that Redis runs nothing between its steps: a delivery written meanwhile is
# written before it (then at or after the cut, as its id is the server's time: made waiting
# here) or after it (after the new last-delivered id: waiting). The steps: read the entries from
# the cut on, a slice at a time (a slice's messages in memory, however many), deleting those
# acked and older than `retain_acked_s` (kept no longer, though not trimmed yet) and counting
# those past the queue's retention (deliverable no more, deleted at its next poll), for as long
# as entries can be either; then count the rest, from the cut on or before it, whichever side
# ends first (slices taken in turns from each); then the consumer group is made anew at the id
# before the cut (XGROUP DESTROY and CREATE): its pending list goes with it, so every delivery
# handed out and not acked is acked (before the cut) or waiting again (from it on), never both
# waiting and due back after its visibility timeout; and `kept` is what is left before the cut.
# Wakes the polls parked on the queue. Returns how many entries are deliverable now; -1 when the
# queue keeps no acked deliveries, -2 when the cut is after the server's clock, false for a
# wrong digest or a queue gone (those change nothing).
SEEK = KEPT + """
local h = redis.call('HMGET', KEYS[2], 'token', 'retain_acked_s', 'retention_s')
if not h[1] or (ARGV[2] ~= '' and h[1] ~= ARGV[2]) or redis.call('EXISTS', KEYS[1]) == 0 then return false end
local keep = tonumber(h[2]) or 0
if keep <= 0 then return -1 end
if id_parts(ARGV[3]) > now_ms() then return -2 end
local last = last_delivered(KEYS[1], ARGV[1])
local ret = tonumber(h[3]) or tonumber(ARGV[5])
local dead = 0
if ret > 0 then dead = now_ms() - ret * 1000 end
local old = now_ms() - keep * 1000
local slice = tonumber(ARGV[6])
local total, expired = 0, 0
-- whether no entry from `id` on is acked and too old, or past the retention
local function plain_from(id)
  local ms = id_parts(id)
  return ms >= dead and (ms >= old or not id_le(id, last))
end
-- a slice from `start` on: the acked entries too old go (a prefix: stored before `old`,
-- delivered, not pending), the others are counted
local function forward(start)
  local got = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', slice)
  local stale, pending, gone = 0, {}, {}
  while stale < #got and id_parts(got[stale + 1][1]) < old and id_le(got[stale + 1][1], last) do
    stale = stale + 1
  end
  if stale > 0 then
    for _, p in ipairs(redis.call('XPENDING', KEYS[1], ARGV[1], got[1][1], got[stale][1], stale)) do
      pending[p[1]] = true
    end
  end
  for i, e in ipairs(got) do
    if i <= stale and not pending[e[1]] then
      gone[#gone + 1] = e[1]
    else
      total = total + 1
      if id_parts(e[1]) < dead then expired = expired + 1 end
    end
  end
  if #gone > 0 then redis.call('XDEL', KEYS[1], unpack(gone)) end
  return got
end
local from, got = ARGV[3], nil
repeat
  got = forward(from)
  if #got > 0 then from = '(' .. got[#got][1] end
until #got < slice or plain_from(got[#got][1])
local below, back, ended_below = 0, ARGV[4], false
local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1]
-- (XREVRANGE to before the first entry walks the whole stream on Redis 6.2: never asked)
if not first or id_le(ARGV[3], first[1]) then ended_below = true end
while #got == slice and not ended_below do
  got = forward(from)
  if #got > 0 then from = '(' .. got[#got][1] end
  if #got < slice then break end
  local b = redis.call('XREVRANGE', KEYS[1], back, '-', 'COUNT', slice)
  below = below + #b
  if #b > 0 then back = '(' .. b[#b][1] end
  if #b < slice or b[#b][1] == first[1] then
    ended_below = true
    break
  end
end
local len = redis.call('XLEN', KEYS[1])
if ended_below then total = len - below end
redis.call('XGROUP', 'DESTROY', KEYS[1], ARGV[1])
redis.call('XGROUP', 'CREATE', KEYS[1], ARGV[1], ARGV[4])
redis.call('HSET', KEYS[2], 'kept', len - total)
redis.call('HDEL', KEYS[2], 'trim_at')
if total > expired then redis.pcall('PUBLISH', '""" + WAKE + """', KEYS[1]) end
return total - expired
"""
