-- turnstile: one token bucket check, atomically (src/redis/token_bucket.rs; semantics
-- in src/token_bucket.rs, of which this is a transcription). Runs after
-- preamble.lua, which reads the arguments and the state.
--
-- KEYS[1]  the bucket: a hash, t = tokens at the last refill, r = the last refill, a
--          point of the refill grid in microseconds. A missing key is a full bucket.
-- ARGV[1]  capacity
-- ARGV[2]  refill interval, microseconds
-- ARGV[3..5] as in preamble.lua
-- ARGV[6]  optional: "refund", give back the cost, capped at the capacity; "settle",
--          settle a reservation of the cost at ARGV[7] with a debt of at most ARGV[8]
--          tokens; or a lease (src/redis/lease/): take up to this many tokens, at
--          least the cost, all or nothing for the cost; absent for a plain check
--
-- Reply: {status, tokens, ahead, missing, replaced}; status 0 allowed, 1 denied, 2
-- cost above capacity; tokens the reading holds after the decision; for a denial, the
-- wait is exactly ahead + missing * interval microseconds (the caller adds, in
-- 128-bit integers); replaced 1 when the key held something other than a bucket,
-- which this check replaced by a full bucket. A peek replies with the token count
-- alone, a refund with the tokens the reading holds after it, a settle with
-- {refunded, charged, forgiven, replaced}. A lease replies
-- {status, tokens, ahead, missing, taken, replaced}: taken is what left the bucket
-- (0 unless allowed; the cost up to ARGV[6] otherwise).
--
-- A lease is the same check on the same fields and grid, so a leased and a plain
-- limiter on one prefix share one bucket: it decides the cost exactly as a plain
-- check does, and, when allowed, takes whatever else the bucket holds up to ARGV[6].
--
-- Debt (a settle charging more than the bucket holds) needs no field of its own: the
-- state is the in-process `full_at`, the grid point at which the bucket is full
-- again, r + (capacity - t) * interval. A bucket owing d tokens at the reading's grid
-- point p is stored as t = 0 at r = p + d * interval, a refill point in the future:
-- a check reads it as a reading behind the last refill (below), holding nothing,
-- and its wait counts the debt; the expiry, set for when the bucket is full again,
-- covers the debt's repayment. A request is allowed iff what the reading has covers
-- its cost, and a reading in debt has less than nothing (tokens - behind < 0): it
-- is denied even a cost of 0, until the debt is repaid.

local capacity, interval = first, second
local up_to = nil
if ARGV[6] and not refund and not settle then
  up_to = tonumber(ARGV[6])
end

-- The latest grid point at or before now.
local point = now - math.fmod(now, interval)
local tokens = capacity
local stored, replaced = read_state()
local old_tokens, last = nil, nil
-- Grid points the reading lies behind the last refill (another server's clock, a
-- stepped-back TIME): the tokens that arrive over them are still missing for it.
local behind = 0
if stored[1] then
  -- A changed interval moves the stored time down to a point of the new grid; the
  -- min below caps what a key holds under a capacity lowered since it was written.
  old_tokens = stored[1]
  last = stored[2] - math.fmod(stored[2], interval)
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

-- Writes the bucket as `tokens` at `point`, unless nothing changed.
local function write()
  if tokens == old_tokens and point == last then
    return
  end
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
      expire_after(full_in)
    end
  end
end

if cost < 0 then
  return math.max(0, tokens - behind)
end
if settle then
  -- The tokens the bucket is short of full at the reading's own grid point (more
  -- than the capacity: in debt), as the in-process full_at - g: a settle moves it
  -- by the difference between the estimate (the cost) and the actual cost.
  local actual, debt_cap = tonumber(ARGV[7]), tonumber(ARGV[8])
  local reading = point - behind * interval
  local owed = capacity - tokens + behind
  local refunded, charged, forgiven = 0, 0, 0
  if actual < cost then
    -- Never fuller than full at the reading.
    refunded = math.min(cost - actual, owed)
    owed = owed - refunded
  elseif actual > cost then
    -- Charged even beyond what the bucket holds, up to a debt of debt_cap tokens;
    -- the rest is forgiven (and reported).
    local extra = actual - cost
    charged = math.max(0, math.min(extra, capacity + debt_cap - owed))
    forgiven = extra - charged
    owed = owed + charged
  end
  if refunded + charged > 0 then
    if owed <= capacity then
      tokens, point = capacity - owed, reading
    else
      tokens, point = 0, reading + (owed - capacity) * interval
    end
    write()
  end
  return {refunded, charged, forgiven, replaced}
end
if refund then
  -- What a refused request took comes back, up to the capacity: the same end state
  -- as the in-process refund.
  tokens = math.min(capacity, tokens + cost)
  write()
  return math.max(0, tokens - behind)
end
-- What the reading holds.
local held = math.max(0, tokens - behind)
if cost > capacity then
  if up_to then
    return {2, held, 0, 0, 0, replaced}
  end
  return {2, held, 0, 0, replaced}
end

local status, ahead, missing, taken = 0, 0, 0, 0
-- tokens - behind, not held: a reading in debt denies a cost of 0 too.
if tokens - behind >= cost then
  -- A lease takes whatever else the reading holds, up to up_to.
  taken = cost
  if up_to and up_to > cost then
    taken = math.min(held, up_to)
  end
  tokens = tokens - taken
  held = held - taken
else
  -- Allowed at the grid point where the bucket, stepped at point, has cost tokens:
  -- the next (cost - tokens) after point (for a reading behind point, possibly one
  -- before it: missing < 0).
  status, ahead, missing = 1, point - now, cost - tokens
end

write()
if up_to then
  return {status, held, ahead, missing, taken, replaced}
end
return {status, held, ahead, missing, replaced}
