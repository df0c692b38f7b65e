-- turnstile: what every limiter script does first (src/redis/engine.rs prepends it to
-- token_bucket.lua and fixed_window.lua, after a line naming the two hash fields of
-- the script's state: FIELDS).
--
-- KEYS[1]  the key's state: a hash with the fields FIELDS[1] and FIELDS[2]
-- ARGV[1]  the algorithm's first parameter (capacity, limit)
-- ARGV[2]  its second (refill interval, window), microseconds
-- ARGV[3]  cost; -1 asks how much is left, and writes nothing
-- ARGV[4]  now, microseconds since the grid's epoch; empty: the server's TIME
-- ARGV[5]  "1": expire the key when it stops mattering
-- ARGV[6]  optional: "refund", give back the cost (capped) taken by a request that did
--          not go ahead; "settle", settle a reservation of the cost (its estimate) at
--          ARGV[7], its actual cost, with a debt of at most ARGV[8]; or, for a lease
--          of the token bucket, how many to take
--
-- The prefix is the limiter's namespace: anything else found at the key (another
-- type, the limiter's fields missing one of the two or not integers in range) is not
-- the limiter's state, and counts as a missing key. A check deletes it before
-- writing; a peek only reads. A hash with none of the limiter's fields is read as a
-- missing key and left to the write, which adds the fields.
--
-- Every number is an integer below 2^53, which Lua's doubles hold exactly. math.fmod
-- is exact; math.floor(a / b) is not (the quotient is rounded first). Numbers given to
-- redis.call are formatted by hand, so no Redis version can write them as 1.78e+15.

local first = tonumber(ARGV[1])
local second = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local now = tonumber(ARGV[4])
if now == nil then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local expire = ARGV[5] == '1'
local refund = ARGV[6] == 'refund'
local settle = ARGV[6] == 'settle'

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

-- The key's two fields ({false, false} for no state of the limiter's), and 1 when
-- something else was there (removed, unless this is a peek).
local function read_state()
  local kind = redis.call('TYPE', KEYS[1])['ok']
  local stored = {false, false}
  local replaced = 0
  if kind == 'hash' then
    stored = redis.call('HMGET', KEYS[1], FIELDS[1], FIELDS[2])
    if not (stored[1] or stored[2]) then
      -- None of the limiter's fields: nothing of its own to distrust. Read as a
      -- missing key; the write adds the fields beside whatever else the hash holds.
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
    return {whole(stored[1]), whole(stored[2])}, replaced
  end
  return stored, replaced
end

-- Expires the key `micros` from now, rounded up to the millisecond: never before it
-- stops mattering.
local function expire_after(micros)
  local rest = math.fmod(micros, 1000)
  local ms = (micros - rest) / 1000
  if rest > 0 then
    ms = ms + 1
  end
  redis.call('PEXPIRE', KEYS[1], int(ms))
end

