-- turnstile: one fixed window check, atomically (src/redis/fixed_window.rs).
--
-- KEYS[1]  the counter: a hash, w = start of the window it counts (microseconds, a
--          multiple of the window), n = requests admitted in that window. A missing
--          key has counted nothing.
-- ARGV[1]  limit: requests admitted per window
-- ARGV[2]  window, microseconds
-- ARGV[3]  cost; -1 asks how many are left, and writes nothing
-- ARGV[4]  now, microseconds since the windows' epoch; empty: the server's TIME
-- ARGV[5]  "1": expire the key when its window ends
--
-- Reply: {status, remaining, wait, replaced}; status 0 allowed, 1 denied, 2 cost
-- above the limit; remaining after the decision; for a denial, wait = microseconds
-- until the window ends; replaced 1 when the key held something other than a
-- counter, which this check replaced by an empty window. A peek replies with
-- remaining alone.
--
-- The prefix is the limiter's namespace: anything else found at the key (another
-- type, the limiter's fields missing one of the two or not integers in range) is not
-- a counter, and counts as a missing key, an empty window. A check deletes it; a peek
-- only reads. A hash with none of the limiter's fields is read as a missing key and
-- left to the write, which adds the fields.
--
-- The increment and the expiry are one script, so no client sees one without the
-- other. The window's start is stored beside the count, and it, not the key's
-- expiry, decides when the count starts over: expiry has millisecond resolution and
-- is checked lazily, so it cannot draw an exact boundary; it only forgets.
-- Numbers: as in token_bucket.lua, integers below 2^53, fmod, formatted by hand.

local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local now = tonumber(ARGV[4])
if now == nil then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local expire = ARGV[5] == '1'

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

local start = now - math.fmod(now, window)
local count = 0
local kind = redis.call('TYPE', KEYS[1])['ok']
local stored = {false, false}
local replaced = 0
if kind == 'hash' then
  stored = redis.call('HMGET', KEYS[1], 'w', 'n')
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
if stored[1] then
  local counted = whole(stored[1])
  counted = counted - math.fmod(counted, window)
  -- A reading older than the counted window counts as inside it: time never runs
  -- backwards for a key. An older counted window is over, and its count with it.
  if counted >= start then
    start = counted
    count = whole(stored[2])
  end
end
local remaining = math.max(limit - count, 0)

if cost < 0 then
  return remaining
end
if cost > limit then
  return {2, remaining, 0, replaced}
end
if cost > remaining then
  return {1, remaining, start + window - now, replaced}
end
if cost > 0 then
  count = count + cost
  redis.call('HSET', KEYS[1], 'w', int(start), 'n', int(count))
  -- The window's first admission sets the expiry; its end does not move after that.
  -- (A replaced key was deleted, so its count starts here too.)
  if expire and count == cost then
    local ends_in = start + window - now
    local rest = math.fmod(ends_in, 1000)
    local ms = (ends_in - rest) / 1000
    if rest > 0 then
      ms = ms + 1
    end
    redis.call('PEXPIRE', KEYS[1], int(ms))
  end
end
return {0, limit - count, 0, replaced}
