"""The Lua scripts of the Redis store: each one round trip, atomic on its keys (which
share a cluster slot where a script touches more than one, but for CLAIM_DELIVERING,
which the store runs only off a Cluster)."""

# A record is a hash: the immutable JSON, and the round and status a claim checks.
# KEYS[1] record; ARGV round, parked, resuming, claimer, attempt. A record parked at that
# round becomes resuming and its JSON is returned; anything else returns false. The same
# attempt run again (its reply lost with a connection) finds its own claim and returns
# the JSON again, with what the first run pushed (v[5]; CLAIM_DELIVERING).
_CLAIM_STEPS = """
local v = redis.call('HMGET', KEYS[1], 'status', 'round', 'json', 'attempt', 'pushed')
if not v[3] or tonumber(v[2]) ~= tonumber(ARGV[1]) then return false end
if v[1] == ARGV[3] and v[4] == ARGV[5] then return {v[3], tonumber(v[5] or 0)} end
if v[1] ~= ARGV[2] then return false end
redis.call('HSET', KEYS[1], 'status', ARGV[3], 'claimer', ARGV[4], 'attempt', ARGV[5])
"""

CLAIM = _CLAIM_STEPS + "return {v[3], 0}\n"

# CLAIM, then KEYS[2] another replica's heartbeat, KEYS[3] its inbox; ARGV[6] payload,
# ARGV[7] the inbox's ttl. Once claimed, the payload is pushed only while the replica
# beats: {json, 1} pushed, {json, 0} not (as the bus's own delivery decides).
CLAIM_DELIVERING = (
    _CLAIM_STEPS
    + """if redis.call('EXISTS', KEYS[2]) == 0 then return {v[3], 0} end
redis.call('RPUSH', KEYS[3], ARGV[6])
redis.call('PEXPIRE', KEYS[3], ARGV[7])
redis.call('HSET', KEYS[1], 'pushed', 1)
return {v[3], 1}
"""
)

# KEYS[1] record; ARGV round, resuming, dead, claimer, attempt. A round resuming for
# `dead` is handed to `claimer` (its JSON returned); anything else returns false. The
# same attempt run again finds its own claim, as with CLAIM.
STEAL = """
local v = redis.call('HMGET', KEYS[1], 'status', 'round', 'json', 'claimer', 'attempt')
if not v[3] then return false end
if v[1] ~= ARGV[2] or tonumber(v[2]) ~= tonumber(ARGV[1]) then return false end
if v[4] == ARGV[4] and v[5] == ARGV[5] then return v[3] end
if v[4] ~= ARGV[3] then return false end
redis.call('HSET', KEYS[1], 'claimer', ARGV[4], 'attempt', ARGV[5], 'pushed', 0)
return v[3]
"""

# KEYS[1] the principal's parked calls (a sorted set scored by until); ARGV now, call,
# until, cap, ttl. Forgets calls past their time, then adds (or moves) the call unless
# the principal is at its cap (returns 0 then): atomic, for the whole fleet. The set
# lives as long as its longest-held call: a call with less time left never shortens it.
_LONGER = """
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[{ttl}]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[{ttl}])
end
"""
_HOLD_STEPS = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local known = redis.call('ZSCORE', KEYS[1], ARGV[2])
if not known and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[2])
""" + _LONGER.format(ttl=5)

HOLD = _HOLD_STEPS + "return 1\n"

# KEYS[1] the principal's parked calls, KEYS[2] the call's record, KEYS[3] (optional) the
# resumed round's outcome; ARGV as HOLD, then the record's json, round, status and ttl,
# then the outcome and its ttl: HOLD, and the record (and outcome) written only if held.
PARK_HELD = (
    _HOLD_STEPS
    + """redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'json', ARGV[6], 'round', ARGV[7], 'status', ARGV[8])
redis.call('PEXPIRE', KEYS[2], ARGV[9])
if KEYS[3] then redis.call('SET', KEYS[3], ARGV[10], 'PX', ARGV[11]) end
return 1
"""
)

# KEYS[1] the principal's parked calls, KEYS[2] the call's record; ARGV call, until,
# ttl of the set, json, round, status, ttl of the record. Written only if no record is.
RESTORE = (
    """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('HSET', KEYS[2], 'json', ARGV[4], 'round', ARGV[5], 'status', ARGV[6])
redis.call('PEXPIRE', KEYS[2], ARGV[7])
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
"""
    + _LONGER.format(ttl=3)
    + "return 1\n"
)

# KEYS[1] record; ARGV[1..4] a claim's round, resuming, claimer and attempt. What follows
# runs only while that very claim holds the round: not once the record is gone, its round
# ended (parked the next, or finished), or a later claim of the same claimer took it (a
# write run again after its reply was lost with a connection, once the next retry claimed).
_WHILE_CLAIMED = """
local v = redis.call('HMGET', KEYS[1], 'status', 'round', 'claimer', 'attempt')
if v[1] ~= ARGV[2] or tonumber(v[2]) ~= tonumber(ARGV[1]) then return 0 end
if v[3] ~= ARGV[3] or v[4] ~= ARGV[4] then return 0 end
"""

# _WHILE_CLAIMED, then ARGV[5] parked and optionally ARGV[6] the json to write back: the
# round is parked again.
GIVE_BACK = (
    _WHILE_CLAIMED
    + """redis.call('HSET', KEYS[1], 'status', ARGV[5], 'claimer', '', 'attempt', '', 'pushed', 0)
if ARGV[6] then redis.call('HSET', KEYS[1], 'json', ARGV[6]) end
return 1
"""
)

# _WHILE_CLAIMED, then ARGV[5] the record's json naming the new owner.
TAKE = (
    _WHILE_CLAIMED
    + """redis.call('HSET', KEYS[1], 'json', ARGV[5])
return 1
"""
)
