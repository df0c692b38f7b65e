-- turnstile: one fixed window check, atomically (src/redis/fixed_window.rs). Runs
-- after preamble.lua, which reads the arguments and the state.
--
-- KEYS[1]  the counter: a hash, w = start of the window it counts (microseconds, a
--          multiple of the window), n = requests admitted in that window. A missing
--          key has counted nothing.
-- ARGV[1]  limit: requests admitted per window
-- ARGV[2]  window, microseconds
-- ARGV[3..5] as in preamble.lua
-- ARGV[6]  optional: "refund", give back the cost to the current window's count;
--          "settle", settle a reservation of the cost at ARGV[7], with a count of at
--          most the limit plus ARGV[8]
--
-- Reply: {status, remaining, wait, replaced}; status 0 allowed, 1 denied, 2 cost
-- above the limit; remaining after the decision; for a denial, wait = microseconds
-- until the first window with room for the cost (the next one, or a later one for a
-- key in debt); replaced 1 when the key held something other than a counter, which
-- this check replaced by an empty window. A peek replies with remaining alone, a
-- refund with remaining after it, a settle with {refunded, charged, forgiven,
-- replaced}.
--
-- Debt: a settle may count past the limit. What a window counts past the limit is
-- carried into the next windows, each of which starts having counted the carry less
-- one limit (the window's refill), so n counted in window w is max(0, n - k * limit)
-- in the window k later; counts within the limit carry nothing, as before. A request
-- is allowed iff the count plus its cost is at most the limit, so a key counting
-- past the limit is denied even a cost of 0. A denial waits for the first window
-- with room for the cost, and a key in debt expires when its debt is repaid, not at
-- its window's end.
--
-- A settle below the estimate gives nothing back: the state cannot tell which window
-- counted the estimate, and giving it to a later window would admit more than the
-- limit there (refunds on settle are the token bucket's).
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
  elseif stored[2] > limit then
    -- A debt, less a limit for each window since (a whole number: both are window
    -- starts; a product past 2^53 is far above any count, so its rounding is moot).
    count = math.max(0, stored[2] - (start - counted) / window * limit)
  end
end

-- Windows from the current one's start until `n` counted there is repaid: the first
-- window with room for `n` more counts (n - limit) / limit windows later, rounded up.
local function windows_until(n)
  local rest = math.fmod(n, limit)
  local whole = (n - rest) / limit
  if rest > 0 then
    whole = whole + 1
  end
  return whole
end

if cost < 0 then
  return math.max(limit - count, 0)
end
if settle then
  local actual, debt_cap = tonumber(ARGV[7]), tonumber(ARGV[8])
  local charged, forgiven = 0, 0
  -- Below the estimate nothing comes back (see the top): the estimate may have been
  -- counted in an earlier window than this one.
  if actual > cost then
    -- Counted even past the limit, up to limit + debt_cap; the rest is forgiven (and
    -- reported).
    local extra = actual - cost
    charged = math.max(0, math.min(extra, limit + debt_cap - count))
    forgiven = extra - charged
    count = count + charged
  end
  if charged > 0 then
    redis.call('HSET', KEYS[1], 'w', int(start), 'n', int(count))
    -- A charge keeps the key until its count is repaid.
    if expire then
      expire_after(start + windows_until(count) * window - now)
    end
  end
  return {0, charged, forgiven, replaced}
end
if refund then
  -- Only the window being counted can take back what it counted; a window that is
  -- over has nothing to give back. The key keeps its expiry (the window's end, or
  -- later: a debt's repayment).
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
if count + cost > limit then
  -- The first window with room for the cost: the next one, unless a debt carries
  -- further (count + cost - limit > limit). A cost of 0 is denied here too when the
  -- key counts past the limit: it has less than nothing.
  return {1, remaining, start + windows_until(count + cost - limit) * window - now, replaced}
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
