/*
 * The Lua scripts of the Redis Streams queue store (queue_redis_scripts.h).
 * Each runs atomically in Redis, so that replicas sharing one Redis never
 * see half of an operation: a put checks the length limit, takes the next
 * index and stores the item in one step; a get with auto_delete returns
 * and deletes in one step, so two replicas never return one item twice.
 *
 * Keys under a queue's prefix P ("<prefix>:q:{<name>}"):
 *   P:seq        the last index given (INCR)
 *   P:s:<prio>   one stream per priority; entry id "<index>-0"; fields
 *                i index, p priority, t put time (unix ns), r request id,
 *                d data, T<key> one per tag
 *   P:prios      sorted set of the priorities in use (score = priority)
 *   P:z          sorted set of every stored item: member the index as 20
 *                digits, score -priority (delivery order, length, rank)
 *   P:rid        hash request id -> index
 *   P:meta       hash: state ("End" after end of stream)
 *   P:consumers  hash "gid.uid" -> heartbeat line
 *                "<redis ms>|<pending>|<start index>|<window>|<auto>|<tags>"
 */
#include "queue_redis_scripts.h"

#include <stddef.h>

/* Helpers every script starts with. */
#define PRELUDE                                                                \
    "-- Every script: KEYS[1] the queue's key prefix, KEYS[2] the store's\n"   \
    "-- notification channel, ARGV[1] the queue's name.\n"                     \
    "local P = KEYS[1]\n"                                                      \
    "local Z = P .. ':z'\n"                                                    \
    "local function pad(i) return string.format('%020d', i) end\n"             \
    "local function sid(i) return string.format('%d-0', i) end\n"              \
    "local function istr(i) return string.format('%d', i) end\n"               \
    "local function notify() redis.call('PUBLISH', KEYS[2], ARGV[1]) end\n"    \
    "-- The stream of the priority holding item idx; nil when not stored.\n"   \
    "local function item_stream(idx)\n"                                        \
    "  local sc = redis.call('ZSCORE', Z, pad(idx))\n"                         \
    "  if not sc then return nil end\n"                                        \
    "  return P .. ':s:' .. istr(-tonumber(sc))\n"                             \
    "end\n"                                                                    \
    "local function groups(s)\n"                                               \
    "  local r = redis.pcall('XINFO', 'GROUPS', s)\n"                          \
    "  local out = {}\n"                                                       \
    "  if type(r) ~= 'table' or r.err then return out end\n"                   \
    "  for _, g in ipairs(r) do\n"                                             \
    "    local o = {}\n"                                                       \
    "    for j = 1, #g, 2 do o[g[j]] = g[j + 1] end\n"                         \
    "    out[#out + 1] = o\n"                                                  \
    "  end\n"                                                                  \
    "  return out\n"                                                           \
    "end\n"                                                                    \
    "local function field(e, name)\n"                                          \
    "  local f = e[2]\n"                                                       \
    "  for j = 1, #f, 2 do if f[j] == name then return f[j + 1] end end\n"     \
    "  return nil\n"                                                           \
    "end\n"                                                                    \
    "-- Removes item idx for every group (acked, deleted, unindexed): 1, or "  \
    "0\n"                                                                      \
    "-- when it was not stored.\n"                                             \
    "local function delete_item(idx)\n"                                        \
    "  local s = item_stream(idx)\n"                                           \
    "  if not s then return 0 end\n"                                           \
    "  local id = sid(idx)\n"                                                  \
    "  local e = redis.call('XRANGE', s, id, id)\n"                            \
    "  if #e > 0 then\n"                                                       \
    "    local rid = field(e[1], 'r')\n"                                       \
    "    if rid and redis.call('HGET', P .. ':rid', rid) == istr(idx) then\n"  \
    "      redis.call('HDEL', P .. ':rid', rid)\n"                             \
    "    end\n"                                                                \
    "  end\n"                                                                  \
    "  for _, g in ipairs(groups(s)) do redis.call('XACK', s, g['name'], id) " \
    "end\n"                                                                    \
    "  redis.call('XDEL', s, id)\n"                                            \
    "  redis.call('ZREM', Z, pad(idx))\n"                                      \
    "  return 1\n"                                                             \
    "end\n"                                                                    \
    "-- Whether entry e holds every tag pair of ARGV[from..].\n"               \
    "local function matches(e, from)\n"                                        \
    "  for j = from, #ARGV - 1, 2 do\n"                                        \
    "    local k = ARGV[j]\n"                                                  \
    "    local have\n"                                                         \
    "    if k == 'requestId' then have = field(e, 'r') else have = field(e, "  \
    "'T' .. k) end\n"                                                          \
    "    if have ~= ARGV[j + 1] then return false end\n"                       \
    "  end\n"                                                                  \
    "  return true\n"                                                          \
    "end\n"                                                                    \
    "local function now_ms()\n"                                                \
    "  local t = redis.call('TIME')\n"                                         \
    "  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"     \
    "end\n"

static const char *const script_sources[REDIS_SCRIPTS] = {
    [REDIS_SCRIPT_PUT] = PRELUDE
    "-- ARGV: 2 max_length, 3 floor (an index this replica saw), 4 priority,\n"
    "-- 5 put time (unix ns), 6 request id, 7 data, 8.. tag key, value.\n"
    "-- Returns {index, length}; index 0 when the queue is full (nothing "
    "stored).\n"
    "local len = redis.call('ZCARD', Z)\n"
    "if len >= tonumber(ARGV[2]) then return {0, len} end\n"
    "local idx = redis.call('INCR', P .. ':seq')\n"
    "local floor = tonumber(ARGV[3])\n"
    "if idx <= floor then\n"
    "  idx = floor + 1\n"
    "  redis.call('SET', P .. ':seq', istr(idx))\n"
    "end\n"
    "local prio = ARGV[4]\n"
    "local f = {'XADD', P .. ':s:' .. prio, sid(idx), 'i', istr(idx), 'p', "
    "prio,\n"
    "           't', ARGV[5], 'r', ARGV[6], 'd', ARGV[7]}\n"
    "for j = 8, #ARGV - 1, 2 do\n"
    "  f[#f + 1] = 'T' .. ARGV[j]\n"
    "  f[#f + 1] = ARGV[j + 1]\n"
    "end\n"
    "redis.call(unpack(f))\n"
    "redis.call('ZADD', Z, -tonumber(prio), pad(idx))\n"
    "redis.call('ZADD', P .. ':prios', tonumber(prio), prio)\n"
    "redis.call('HSET', P .. ':rid', ARGV[6], istr(idx))\n"
    "notify()\n"
    "return {idx, len + 1}\n",
    [REDIS_SCRIPT_GET] = PRELUDE
    "-- ARGV: 2 first index (0 = head), 3 at most this many, 4 request id or "
    "'',\n"
    "-- 5 '1' to delete what is returned, 6.. filter key, value.\n"
    "-- Returns {length, entry...} in delivery order (priority, then index).\n"
    "local start = tonumber(ARGV[2])\n"
    "local want = tonumber(ARGV[3])\n"
    "local out = {}\n"
    "local function consider(e)\n"
    "  if matches(e, 6) then out[#out + 1] = e end\n"
    "end\n"
    "if ARGV[4] ~= '' then\n"
    "  local idx = redis.call('HGET', P .. ':rid', ARGV[4])\n"
    "  if idx and tonumber(idx) >= start then\n"
    "    local s = item_stream(tonumber(idx))\n"
    "    if s then\n"
    "      local e = redis.call('XRANGE', s, sid(idx), sid(idx))\n"
    "      if #e > 0 then consider(e[1]) end\n"
    "    end\n"
    "  end\n"
    "else\n"
    "  local prios = redis.call('ZREVRANGE', P .. ':prios', 0, -1)\n"
    "  for _, prio in ipairs(prios) do\n"
    "    if #out >= want then break end\n"
    "    local s = P .. ':s:' .. prio\n"
    "    local from = '-'\n"
    "    if start > 0 then from = sid(start) end\n"
    "    while #out < want do\n"
    "      local es = redis.call('XRANGE', s, from, '+', 'COUNT', 64)\n"
    "      for _, e in ipairs(es) do\n"
    "        consider(e)\n"
    "        if #out >= want then break end\n"
    "      end\n"
    "      if #es < 64 then break end\n"
    "      from = '(' .. es[#es][1]\n"
    "    end\n"
    "  end\n"
    "end\n"
    "if ARGV[5] == '1' and #out > 0 then\n"
    "  for _, e in ipairs(out) do delete_item(tonumber(field(e, 'i'))) end\n"
    "  notify()\n"
    "end\n"
    "local res = {redis.call('ZCARD', Z)}\n"
    "for _, e in ipairs(out) do res[#res + 1] = e end\n"
    "return res\n",
    [REDIS_SCRIPT_DELETE] = PRELUDE
    "-- ARGV: 2.. indexes. Deletes them for every group (delete and commit).\n"
    "-- Returns {deleted, length}.\n"
    "local n = 0\n"
    "for j = 2, #ARGV do n = n + delete_item(tonumber(ARGV[j])) end\n"
    "if n > 0 then notify() end\n"
    "return {n, redis.call('ZCARD', Z)}\n",
    [REDIS_SCRIPT_TRUNCATE] =
        PRELUDE "-- ARGV: 2 before. Deletes every item with a smaller index.\n"
                "-- Returns {deleted, length}.\n"
                "local before = tonumber(ARGV[2])\n"
                "local n = 0\n"
                "for _, m in ipairs(redis.call('ZRANGE', Z, 0, -1)) do\n"
                "  local idx = tonumber(m)\n"
                "  if idx < before then n = n + delete_item(idx) end\n"
                "end\n"
                "if n > 0 then notify() end\n"
                "return {n, redis.call('ZCARD', Z)}\n",
    [REDIS_SCRIPT_END] = PRELUDE
    "-- ARGV: 2 '1' to force. The queue's state becomes End; forced, every "
    "item\n"
    "-- no consumer holds is deleted. Returns {deleted, length}.\n"
    "redis.call('HSET', P .. ':meta', 'state', 'End')\n"
    "local n = 0\n"
    "if ARGV[2] == '1' then\n"
    "  local held = {}\n"
    "  for _, prio in ipairs(redis.call('ZRANGE', P .. ':prios', 0, -1)) do\n"
    "    local s = P .. ':s:' .. prio\n"
    "    for _, g in ipairs(groups(s)) do\n"
    "      for _, p in ipairs(redis.call('XPENDING', s, g['name'], '-', '+', "
    "1000000)) do\n"
    "        held[p[1]] = true\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "  for _, m in ipairs(redis.call('ZRANGE', Z, 0, -1)) do\n"
    "    local idx = tonumber(m)\n"
    "    if not held[sid(idx)] then n = n + delete_item(idx) end\n"
    "  end\n"
    "end\n"
    "notify()\n"
    "return {n, redis.call('ZCARD', Z)}\n",
    [REDIS_SCRIPT_SEARCH] = PRELUDE
    "-- ARGV: 2 index. Returns {0} when not stored, else {1, is_pending,\n"
    "-- 'gid.uid' or '', deliverable items ahead of it}.\n"
    "local idx = tonumber(ARGV[2])\n"
    "local s = item_stream(idx)\n"
    "if not s then return {0} end\n"
    "local id = sid(idx)\n"
    "for _, g in ipairs(groups(s)) do\n"
    "  local p = redis.call('XPENDING', s, g['name'], id, id, 1)\n"
    "  if #p > 0 and p[1][2] ~= '~returned' then\n"
    "    return {1, 1, g['name'] .. '.' .. p[1][2], 0}\n"
    "  end\n"
    "end\n"
    "-- Deliverable items ahead: those before it not held by a consumer.\n"
    "local held = {}\n"
    "for _, prio in ipairs(redis.call('ZRANGE', P .. ':prios', 0, -1)) do\n"
    "  local ps = P .. ':s:' .. prio\n"
    "  for _, g in ipairs(groups(ps)) do\n"
    "    if g['pending'] > 0 then\n"
    "      for _, p in ipairs(redis.call('XPENDING', ps, g['name'], '-', '+', "
    "100000)) do\n"
    "        if p[2] ~= '~returned' then held[p[1]] = true end\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "end\n"
    "local rank = redis.call('ZRANK', Z, pad(idx))\n"
    "local ahead = 0\n"
    "if rank > 0 then\n"
    "  for _, m in ipairs(redis.call('ZRANGE', Z, 0, rank - 1)) do\n"
    "    if not held[sid(tonumber(m))] then ahead = ahead + 1 end\n"
    "  end\n"
    "end\n"
    "return {1, 0, '', ahead}\n",
    [REDIS_SCRIPT_COUNT] = PRELUDE
    "-- ARGV: 2 priority or '' for any, 3.. filter key, value. Returns the\n"
    "-- number of stored items that match.\n"
    "if #ARGV < 3 then\n"
    "  if ARGV[2] == '' then return redis.call('ZCARD', Z) end\n"
    "  local sc = -tonumber(ARGV[2])\n"
    "  return redis.call('ZCOUNT', Z, sc, sc)\n"
    "end\n"
    "local prios\n"
    "if ARGV[2] ~= '' then prios = {ARGV[2]} else\n"
    "  prios = redis.call('ZRANGE', P .. ':prios', 0, -1)\n"
    "end\n"
    "local n = 0\n"
    "for _, prio in ipairs(prios) do\n"
    "  local s = P .. ':s:' .. prio\n"
    "  local from = '-'\n"
    "  while true do\n"
    "    local es = redis.call('XRANGE', s, from, '+', 'COUNT', 64)\n"
    "    for _, e in ipairs(es) do\n"
    "      if matches(e, 3) then n = n + 1 end\n"
    "    end\n"
    "    if #es < 64 then break end\n"
    "    from = '(' .. es[#es][1]\n"
    "  end\n"
    "end\n"
    "return n\n",
    [REDIS_SCRIPT_ATTRS] = PRELUDE
    "-- ARGV: 2 how long (ms) a consumer without a heartbeat stays listed.\n"
    "-- Returns {length, first index or 0, last index or 0, state,\n"
    "-- {id, idle ms, heartbeat line, ...}, {group, consumers, pending, "
    "...}}.\n"
    "local len = redis.call('ZCARD', Z)\n"
    "local first, last = 0, 0\n"
    "local gs, gorder = {}, {}\n"
    "for _, prio in ipairs(redis.call('ZRANGE', P .. ':prios', 0, -1)) do\n"
    "  local sc = -tonumber(prio)\n"
    "  local lo = redis.call('ZRANGEBYSCORE', Z, sc, sc, 'LIMIT', 0, 1)\n"
    "  local hi = redis.call('ZREVRANGEBYSCORE', Z, sc, sc, 'LIMIT', 0, 1)\n"
    "  if #lo > 0 and (first == 0 or tonumber(lo[1]) < first) then first = "
    "tonumber(lo[1]) end\n"
    "  if #hi > 0 and tonumber(hi[1]) > last then last = tonumber(hi[1]) end\n"
    "  for _, g in ipairs(groups(P .. ':s:' .. prio)) do\n"
    "    local name = g['name']\n"
    "    if not gs[name] then\n"
    "      gs[name] = {0, 0}\n"
    "      gorder[#gorder + 1] = name\n"
    "    end\n"
    "    if g['consumers'] > gs[name][1] then gs[name][1] = g['consumers'] "
    "end\n"
    "    gs[name][2] = gs[name][2] + g['pending']\n"
    "  end\n"
    "end\n"
    "local state = redis.call('HGET', P .. ':meta', 'state') or 'OK'\n"
    "local now = now_ms()\n"
    "local stale = tonumber(ARGV[2])\n"
    "local cons = redis.call('HGETALL', P .. ':consumers')\n"
    "local live = {}\n"
    "for j = 1, #cons, 2 do\n"
    "  local seen = tonumber(string.match(cons[j + 1], '^(%d+)|'))\n"
    "  if seen and now - seen <= stale then\n"
    "    live[#live + 1] = cons[j]\n"
    "    live[#live + 1] = istr(now - seen)\n"
    "    live[#live + 1] = cons[j + 1]\n"
    "  else\n"
    "    redis.call('HDEL', P .. ':consumers', cons[j])\n"
    "  end\n"
    "end\n"
    "local glist = {}\n"
    "for _, name in ipairs(gorder) do\n"
    "  glist[#glist + 1] = name\n"
    "  glist[#glist + 1] = gs[name][1]\n"
    "  glist[#glist + 1] = gs[name][2]\n"
    "end\n"
    "return {len, first, last, state, live, glist}\n",
    [REDIS_SCRIPT_PUMP] = PRELUDE
    "-- A consumer's turn. ARGV: 2 gid, 3 uid, 4 at most this many pending "
    "ids\n"
    "-- listed per priority, 5 heartbeat line tail, 6 where a new group "
    "starts.\n"
    "-- Makes sure the group exists on every priority's stream, lists the\n"
    "-- consumer's pending ids per priority (highest first) and marks them\n"
    "-- fresh (idle 0) so that no other consumer claims them, and records the\n"
    "-- heartbeat. Returns {priority, {id...}, ...}.\n"
    "local g, uid = ARGV[2], ARGV[3]\n"
    "if not redis.call('ZSCORE', P .. ':prios', '0') then\n"
    "  redis.call('ZADD', P .. ':prios', 0, '0')\n"
    "end\n"
    "local res = {}\n"
    "local total = 0\n"
    "for _, prio in ipairs(redis.call('ZREVRANGE', P .. ':prios', 0, -1)) do\n"
    "  local s = P .. ':s:' .. prio\n"
    "  redis.pcall('XGROUP', 'CREATE', s, g, ARGV[6], 'MKSTREAM')\n"
    "  local list = {}\n"
    "  for _, p in ipairs(redis.call('XPENDING', s, g, '-', '+', "
    "tonumber(ARGV[4]), uid)) do\n"
    "    list[#list + 1] = p[1]\n"
    "  end\n"
    "  if #list > 0 then\n"
    "    local c = {'XCLAIM', s, g, uid, 0}\n"
    "    for _, id in ipairs(list) do c[#c + 1] = id end\n"
    "    c[#c + 1] = 'JUSTID'\n"
    "    redis.call(unpack(c))\n"
    "  end\n"
    "  total = total + #list\n"
    "  res[#res + 1] = prio\n"
    "  res[#res + 1] = list\n"
    "end\n"
    "redis.call('HSET', P .. ':consumers', g .. '.' .. uid,\n"
    "           istr(now_ms()) .. '|' .. total .. '|' .. ARGV[5])\n"
    "return res\n",
    [REDIS_SCRIPT_FORGET] = PRELUDE
    "-- ARGV: 2 gid, 3 uid. A consumer closed: its heartbeat line goes, and "
    "so\n"
    "-- does its Redis consumer when it holds nothing (what it holds waits "
    "for\n"
    "-- it, then for the group). Returns 1.\n"
    "redis.call('HDEL', P .. ':consumers', ARGV[2] .. '.' .. ARGV[3])\n"
    "for _, prio in ipairs(redis.call('ZRANGE', P .. ':prios', 0, -1)) do\n"
    "  local s = P .. ':s:' .. prio\n"
    "  local p = redis.pcall('XPENDING', s, ARGV[2], '-', '+', 1, ARGV[3])\n"
    "  if type(p) == 'table' and not p.err and #p == 0 then\n"
    "    redis.pcall('XGROUP', 'DELCONSUMER', s, ARGV[2], ARGV[3])\n"
    "  end\n"
    "end\n"
    "return 1\n",
    [REDIS_SCRIPT_REJECT] = PRELUDE
    "-- ARGV: 2 gid, 3 uid, 4 idle (ms) to give the items, 5.. indexes. The\n"
    "-- consumer's items go to the placeholder consumer '~returned', idle "
    "long\n"
    "-- enough for any consumer of the group to claim them at once.\n"
    "-- Returns the number given back.\n"
    "local n = 0\n"
    "for j = 5, #ARGV do\n"
    "  local idx = tonumber(ARGV[j])\n"
    "  local s = item_stream(idx)\n"
    "  if s then\n"
    "    local id = sid(idx)\n"
    "    local p = redis.pcall('XPENDING', s, ARGV[2], id, id, 1)\n"
    "    if type(p) == 'table' and not p.err and #p > 0 and p[1][2] == ARGV[3] "
    "then\n"
    "      redis.call('XCLAIM', s, ARGV[2], '~returned', 0, id, 'IDLE', "
    "ARGV[4], 'JUSTID')\n"
    "      n = n + 1\n"
    "    end\n"
    "  end\n"
    "end\n"
    "if n > 0 then notify() end\n"
    "return n\n",
};

static const char *const script_names[REDIS_SCRIPTS] = {
    [REDIS_SCRIPT_PUT] = "put",       [REDIS_SCRIPT_GET] = "get",
    [REDIS_SCRIPT_DELETE] = "delete", [REDIS_SCRIPT_TRUNCATE] = "truncate",
    [REDIS_SCRIPT_END] = "end",       [REDIS_SCRIPT_SEARCH] = "search",
    [REDIS_SCRIPT_COUNT] = "count",   [REDIS_SCRIPT_ATTRS] = "attrs",
    [REDIS_SCRIPT_PUMP] = "pump",     [REDIS_SCRIPT_FORGET] = "forget",
    [REDIS_SCRIPT_REJECT] = "reject",
};

const char *redis_script_source(redis_script id) {
    return (unsigned)id < REDIS_SCRIPTS ? script_sources[id] : "";
}

const char *redis_script_name(redis_script id) {
    return (unsigned)id < REDIS_SCRIPTS ? script_names[id] : "?";
}
