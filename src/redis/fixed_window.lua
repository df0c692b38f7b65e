-- turnstile: one fixed window check, atomically (src/redis/fixed_window.rs). Runs
-- after preamble.lua, which reads the arguments and the state.
--
-- KEYS[1]  the counter: a hash, w = start of the window it counts (microseconds, a
--          multiple of the window), n = requests admitted in that window. A missing
--          key has counted nothing.
-- ARGV[1]  limit: requests admitted per window
-- ARGV[2]  window, microseconds
-- ARGV[3..5] as in preamble.lua
-- ARGV[6]  optional: "refund", give back the cost to the current window's count
--
-- Reply: {status, remaining, wait, replaced}; status 0 allowed, 1 denied, 2 cost
-- above the limit; remaining after the decision; for a denial, wait = microseconds
-- until the window ends; replaced 1 when the key held something other than a
-- counter, which this check replaced by an empty window. A peek replies with
-- remaining alone, a refund with remaining after it.
--
-- The increment and the expiry are one script, so no client sees one without the
-- other. The window's start is stored beside the count, and it, not the key's
-- expiry, decides when the count starts over: expiry has millisecond resolution and
-- is checked lazily, so it cannot draw an exact boundary; it only forgets.

local limit, window = first, second
local start = now - math.fmod(now, window)
local count = 0
local stored, replaced = read_state()
if stored[1] then
  local counted = stored[1] - math.fmod(stored[1], window)
  -- A reading older than the counted window counts as inside it: time never runs
  -- backwards for a key. An older counted window is over, and its count with it.
  if counted >= start then
    start = counted
    count = stored[2]
  end
end

if cost < 0 then
  return math.max(limit - count, 0)
end
if refund then
  -- Only the window being counted can take back what it counted; a window that is
  -- over has nothing to give back. The key keeps its expiry, the window's end.
  if count > 0 then
    count = math.max(0, count - cost)
    redis.call('HSET', KEYS[1], 'w', int(start), 'n', int(count))
  end
  return math.max(limit - count, 0)
end
local remaining = math.max(limit - count, 0)
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
    expire_after(start + window - now)
  end
end
return {0, limit - count, 0, replaced}
