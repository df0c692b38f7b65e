-- turnstile: one token bucket check, atomically (src/redis/token_bucket.rs; semantics
-- in src/token_bucket/state.rs, of which this is a transcription).
--
-- KEYS[1]  the bucket: a hash, t = tokens at the last refill, r = the last refill, a
--          point of the refill grid in microseconds. A missing key is a full bucket.
-- ARGV[1]  capacity
-- ARGV[2]  refill interval, microseconds
-- ARGV[3]  cost; -1 asks how many tokens there are, and writes nothing
-- ARGV[4]  now, microseconds since the grid's epoch; empty: the server's TIME
-- ARGV[5]  "1": expire the key when its bucket would be full again
-- ARGV[6]  optional, a lease (src/redis/lease/): take up to this many tokens, at least
--          the cost, all or nothing for the cost; absent for a plain check
--
-- Reply: {status, tokens, ahead, missing, replaced}; status 0 allowed, 1 denied, 2
-- cost above capacity; tokens the reading holds after the decision; for a denial, the wait is exactly
-- ahead + missing * interval microseconds (the caller adds, in 128-bit integers);
-- replaced 1 when the key held something other than a bucket, which this check
-- replaced by a full bucket. A peek replies with the token count alone. A lease
-- replies {status, tokens, ahead, missing, taken, replaced}: taken is what left the
-- bucket (0 unless allowed; the cost up to ARGV[6] otherwise).
--
-- A lease is the same check on the same fields and grid, so a leased and a plain
-- limiter on one prefix share one bucket: it decides the cost exactly as a plain
-- check does, and, when allowed, takes whatever else the bucket holds up to ARGV[6].
--
-- The prefix is the limiter's namespace: anything else found at the key (another
-- type, the limiter's fields missing one of the two or not integers in range) is not
-- a bucket, and counts as a missing key, a full bucket. A check deletes it before
-- writing; a peek only reads. A hash with none of the limiter's fields is read as a
-- missing key and left to the write, which adds the fields.
--
-- Every number is an integer below 2^53, which Lua's doubles hold exactly. math.fmod
-- is exact; math.floor(a / b) is not (the quotient is rounded first). Numbers given to
-- redis.call are formatted by hand, so no Redis version can write them as 1.78e+15.

local capacity = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local now = tonumber(ARGV[4])
if now == nil then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local expire = ARGV[5] == '1'
local up_to = nil
if ARGV[6] then
  up_to = tonumber(ARGV[6])
end

local function int(x)
  return string.format('%.0f', x)
end

-- A stored number, if it is an integer in 0 .. 2^53.
local function whole(text)
  local x = tonumber(text)
  if x == nil or x ~= x or x < 0 or x > 9007199254740992 or math.fmod(x, 1) ~= 0 then
    return nil
  end
  return x
end

-- The latest grid point at or before now.
local point = now - math.fmod(now, interval)
local tokens = capacity
local kind = redis.call('TYPE', KEYS[1])['ok']
local stored = {false, false}
local replaced = 0
if kind == 'hash' then
  stored = redis.call('HMGET', KEYS[1], 't', 'r')
  if not (stored[1] or stored[2]) then
    -- None of the limiter's fields: nothing of its own to distrust. Read as a missing
    -- key; the write below adds the fields beside whatever else the hash holds.
    stored = {false, false}
  elseif not (whole(stored[1]) and whole(stored[2])) then
    stored = {false, false}
    replaced = 1
  end
elseif kind ~= 'none' then
  replaced = 1
end
if replaced == 1 and cost >= 0 then
  -- UNLINK: a huge foreign value is freed in the background, not while Redis waits.
  redis.call('UNLINK', KEYS[1])
end
local old_tokens, last = nil, nil
-- Grid points the reading lies behind the last refill (another server's clock, a
-- stepped-back TIME): the tokens that arrive over them are still missing for it.
local behind = 0
if stored[1] then
  -- A changed interval moves the stored time down to a point of the new grid; the
  -- min below caps what a key holds under a capacity lowered since it was written.
  old_tokens = whole(stored[1])
  last = whole(stored[2])
  last = last - math.fmod(last, interval)
  -- A reading older than the last refill sees the bucket as of its own grid point:
  -- the tokens that arrive between the two are still missing, so it holds fewer,
  -- never more. Whatever it takes comes after the tokens already spoken for, so the
  -- state is stepped at the last refill.
  if last > point then
    behind = (last - point) / interval
    point = last
  end
  tokens = math.min(capacity, old_tokens + (point - last) / interval)
end
-- What the reading holds.
local held = math.max(0, tokens - behind)

if cost < 0 then
  return held
end
if cost > capacity then
  if up_to then
    return {2, held, 0, 0, 0, replaced}
  end
  return {2, held, 0, 0, replaced}
end

local status, ahead, missing, taken = 0, 0, 0, 0
if held >= cost then
  -- A lease takes whatever else the reading holds, up to up_to.
  taken = cost
  if up_to and up_to > cost then
    taken = math.min(held, up_to)
  end
  tokens = tokens - taken
  held = held - taken
else
  -- Allowed at the grid point where the bucket, stepped at point, has cost tokens:
  -- the next (cost - tokens) after point.
  status, ahead, missing = 1, point - now, cost - tokens
end

if tokens ~= old_tokens or point ~= last then
  -- Full again at point + (capacity - tokens) * interval.
  local full_in = point - now + (capacity - tokens) * interval
  if expire and full_in <= 0 then
    -- Full now: the expiry would remove the key at once, and a missing key is a
    -- full bucket.
    if stored[1] then
      redis.call('DEL', KEYS[1])
    end
  else
    redis.call('HSET', KEYS[1], 't', int(tokens), 'r', int(point))
    if expire then
      -- Never expire before the bucket is full: round up to the millisecond.
      local rest = math.fmod(full_in, 1000)
      local ms = (full_in - rest) / 1000
      if rest > 0 then
        ms = ms + 1
      end
      redis.call('PEXPIRE', KEYS[1], int(ms))
    end
  end
end
if up_to then
  return {status, held, ahead, missing, taken, replaced}
end
return {status, held, ahead, missing, replaced}
