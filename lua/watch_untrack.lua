-- Take a key that the watch of holds read and found gone out of Redis's tracking table (see holdwatch.go).
-- The read put the key in the table, where an entry stays until the key is next written: the name of a
-- lock released or lost, never used again, would keep it for good. Writing the key while it does not
-- exist, and deleting it in the same script, sends its invalidation, which takes it out of the table, and
-- leaves the keyspace as it was: no other client sees the key in between. (Keyspace notifications, when
-- turned on, tell a set and a del of it; replicas and the AOF get both.)
--
-- KEYS[1]  the key read
--
-- Returns 1 when the key did not exist (it was written and deleted: its invalidation went out), 0 when it
-- exists (its next write takes it out of the table; nothing was changed).
if redis.call('exists', KEYS[1]) == 1 then
  return 0
end
redis.call('set', KEYS[1], '')
redis.call('del', KEYS[1])
return 1
