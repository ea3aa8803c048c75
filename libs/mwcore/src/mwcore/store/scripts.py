"""Lua scripts of the Redis checkpoint store, registered once per connection pool.

All keys of one interval share a hash tag, so each script runs on one Redis Cluster
slot. Tokens are ``<redis run id>:<grant counter>:<random nonce>``: the nonce makes
a repeat impossible even if the counter rolls back with a lost AOF tail, and the run
id voids every token granted before a Redis restart (a rolled-back Redis may hold an
old token as current; its holder's soft state could be ahead of what survived).
"""

from __future__ import annotations

# The event time one set of seen ids covers (``MW_SEEN_BUCKETS``): the seen GC drops a
# bucket once all of it is below its timestamp, so an id may outlive its GC by this much.
SEEN_BUCKET_MS = 5_000

# KEYS[1] token   KEYS[2] grant counter   KEYS[3] meta hash   KEYS[4] watermark report stream
# ARGV[1] random nonce   ARGV[2] owner description   ARGV[3] "safe" | "counter-only"
# ARGV[4] interval index   ARGV[5] report stream's approximate maximum length
# Returns the new token. "counter-only" is the unsafe scheme, kept for a negative control.
# The grant is also appended to the computation's report stream, in the same atomic
# step, so the watermark authority sees every grant in order with the reports: a
# report written after this entry under an older token is a zombie's.
GRANT = """
local n = redis.call('INCR', KEYS[2])
local token
if ARGV[3] == 'counter-only' then
  token = tostring(n)
else
  local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  token = run_id .. ':' .. n .. ':' .. ARGV[1]
end
redis.call('SET', KEYS[1], token)
redis.call('HSET', KEYS[3], 'owner', ARGV[2], 'token', token)
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[5], '*', 'r',
  cjson.encode({k = 'grant', i = tonumber(ARGV[4]), t = token}))
return token
"""

# KEYS[1] token  KEYS[2] state  KEYS[3] timers  KEYS[4] pending  KEYS[5] seen
# KEYS[6] positions  KEYS[7] meta  KEYS[8] backlog segments  [KEYS[9] seen buckets]
# ARGV[1] token  ARGV[2] "1" checks the token, "0" skips the check (negative controls only)
# ARGV[3] commit id (unique per checkpoint: a retry after a lost reply is not applied twice)
# ARGV[4..] eleven sections, each a count n then its items:
#   1 state set    n pairs (key, value)      2 state delete   n keys
#   3 timer set    n pairs (field, value)    4 timer delete   n fields
#   5 pending set  n pairs (id, production)  6 pending delete n ids
#   7 seen         n pairs (timestamp, id)   8 positions      n pairs (field, next offset)
#   9 seen GC      0 or 1 timestamp: forget seen ids older than it (semantics section 2)
#  10 segments set n pairs (key, segments)   11 segments delete n keys
# Steps: (1) parse and validate every section, (2) check the token and the run id,
# (3) return at once if this commit id was already applied, (4) write. Nothing is
# written before steps 1 to 3 pass (a Lua script is not rolled back on error). Returns
# the interval's commit count; errors start FENCED or BADARGS.
# Seen ids: with KEYS[9] (MW_SEEN_BUCKETS), into sets of SEEN_BUCKET_MS of their
# timestamps, KEYS[5] .. ':' .. bucket, whose numbers the sorted set KEYS[9] indexes
# (a set insert costs Redis a fraction of a sorted-set insert among equal scores);
# without it, into the sorted set KEYS[5] scored by timestamp, as before buckets. The
# seen GC empties both: the sorted set below the timestamp, and every bucket wholly
# below it (a bucket partly below it stays until it is not: keeping an id longer is
# safe). KEYS[5] .. ':b' is always the bucket index, named or not (the same hash tag).
COMMIT = """
local argc = #ARGV
local sections = {}
local i = 4
for s = 1, 11 do
  local n = tonumber(ARGV[i])
  if n == nil or n < 0 then return redis.error_reply('BADARGS section ' .. s .. ' count') end
  local width = 2
  if s == 2 or s == 4 or s == 6 or s == 9 or s == 11 then width = 1 end
  if s == 9 and n > 1 then return redis.error_reply('BADARGS section 9 count') end
  local first = i + 1
  local last = i + n * width
  if last > argc then return redis.error_reply('BADARGS section ' .. s .. ' overruns') end
  if s == 7 or s == 8 then
    for j = first, last, 2 do
      local num = ARGV[(s == 7) and j or (j + 1)]
      if tonumber(num) == nil then return redis.error_reply('BADARGS section ' .. s .. ' number') end
    end
  end
  if s == 9 and n == 1 and tonumber(ARGV[first]) == nil then
    return redis.error_reply('BADARGS section 9 number')
  end
  sections[s] = {first, last}
  i = last + 1
end
if i ~= argc + 1 then return redis.error_reply('BADARGS trailing arguments') end

if ARGV[2] == '1' then
  local current = redis.call('GET', KEYS[1])
  if current ~= ARGV[1] then return redis.error_reply('FENCED token') end
  local colon = string.find(ARGV[1], ':', 1, true)
  if colon then
    local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
    if string.sub(ARGV[1], 1, colon - 1) ~= run_id then
      return redis.error_reply('FENCED redis restarted')
    end
  end
end

if redis.call('HGET', KEYS[7], 'last') == ARGV[3] then
  return tonumber(redis.call('HGET', KEYS[7], 'commits'))
end

local function apply(cmd, key, s)
  local first, last = sections[s][1], sections[s][2]
  local chunk = 2000
  for a = first, last, chunk do
    local b = math.min(a + chunk - 1, last)
    redis.call(cmd, key, unpack(ARGV, a, b))
  end
end
apply('HSET', KEYS[2], 1)
apply('HDEL', KEYS[2], 2)
apply('HSET', KEYS[3], 3)
apply('HDEL', KEYS[3], 4)
apply('HSET', KEYS[4], 5)
apply('HDEL', KEYS[4], 6)
local index = KEYS[5] .. ':b'
if #KEYS >= 9 then
  local floor, width = math.floor, SEEN_BUCKET_MS
  local groups, counts = {}, {}
  local lastb, items, n = nil, nil, 0
  for j = sections[7][1], sections[7][2], 2 do  -- (timestamps checked above)
    local b = floor(tonumber(ARGV[j]) / width)
    if b ~= lastb then  -- (a batch's records mostly share a bucket: one look-up each run)
      if lastb ~= nil then counts[lastb] = n end
      items = groups[b]
      if items == nil then
        items = {}
        groups[b] = items
        counts[b] = 0
      end
      n, lastb = counts[b], b
    end
    n = n + 1
    items[n] = ARGV[j + 1]
  end
  if lastb ~= nil then counts[lastb] = n end
  for b, ids in pairs(groups) do
    local name = string.format('%d', b)
    local key, count = KEYS[5] .. ':' .. name, counts[b]
    for a = 1, count, 4000 do
      redis.call('SADD', key, unpack(ids, a, math.min(a + 3999, count)))
    end
    redis.call('ZADD', index, b, name)
  end
else
  apply('ZADD', KEYS[5], 7)
end
apply('HSET', KEYS[6], 8)
apply('HSET', KEYS[8], 10)
apply('HDEL', KEYS[8], 11)
if sections[9][2] >= sections[9][1] then
  local below = tonumber(ARGV[sections[9][1]])
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', '(' .. ARGV[sections[9][1]])
  local whole = math.floor(below / SEEN_BUCKET_MS) - 1
  local gone = redis.call('ZRANGEBYSCORE', index, '-inf', whole)
  for _, b in ipairs(gone) do
    redis.call('DEL', KEYS[5] .. ':' .. b)
  end
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', index, '-inf', whole)
  end
end
redis.call('HINCRBY', KEYS[7], 'c:' .. ARGV[1], 1)
redis.call('HSET', KEYS[7], 'last', ARGV[3])
return redis.call('HINCRBY', KEYS[7], 'commits', 1)
""".replace("SEEN_BUCKET_MS", str(SEEN_BUCKET_MS))

# KEYS[1] seen (sorted set)  KEYS[2] seen bucket index   ARGV the record ids
# Per id, 1 if the interval has seen it (in the sorted set or in any bucket), else 0.
SEEN = """
local buckets = redis.call('ZRANGE', KEYS[2], 0, -1, 'REV')  -- newest first: a re-sent record is recent
local out = {}
for i = 1, #ARGV do
  local hit = redis.call('ZSCORE', KEYS[1], ARGV[i]) and 1 or 0
  if hit == 0 then
    for _, b in ipairs(buckets) do
      if redis.call('SISMEMBER', KEYS[1] .. ':' .. b, ARGV[i]) == 1 then
        hit = 1
        break
      end
    end
  end
  out[i] = hit
end
return out
"""

# KEYS[1] token   KEYS[2] key to set
# ARGV[1] token   ARGV[2] value
# Sets KEYS[2] only if ARGV[1] is the current token (an injector's promise: a replaced
# process must not raise what its successor restores). Errors FENCED otherwise.
# KEYS[1] token  KEYS[2] meta hash   ARGV[1] the releasing owner's token
# A clean stop: the interval's recorded owner is cleared if the token is still current
# (a stale release changes nothing). Returns 1 if cleared, else 0.
RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[2], 'owner', '')
return 1
"""

FENCED_SET = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return redis.error_reply('FENCED token') end
redis.call('SET', KEYS[2], ARGV[2])
return 1
"""
