package relock

import (
	"strings"
	"testing"
)

// redissonPrefixName and redissonSuffixName restate, independently of names.go, how Redisson forms a lock's
// companion keys (RedissonObject.prefixName / suffixName): "prefix:{name}", or "prefix:name" when the
// name already holds a "{"; "{name}:suffix", or "name:suffix".
func redissonPrefixName(prefix, name string) string {
	if strings.Contains(name, "{") {
		return prefix + ":" + name
	}
	return prefix + ":{" + name + "}"
}

func redissonSuffixName(name, suffix string) string {
	if strings.Contains(name, "{") {
		return name + ":" + suffix
	}
	return "{" + name + "}:" + suffix
}

// lockKeys are the keys and channels of one lock name, as relock's lock objects build them.
type lockKeys struct {
	channel, fairQueue, fairTimeout, fairWaiterChannel, rwChannel, rwReadHold, token string
}

func relockKeys(name string) lockKeys {
	c := &Client{id: "c"}
	rl := c.Lock(name, WithFencing())
	fl := c.FairLock(name)
	rw := c.ReadWriteLock(name)
	rr := rw.ReadLock().spec.(*readSpec)
	acquire := rl.spec.(*rlockSpec).acquireKeys
	return lockKeys{
		channel:           rl.channel,
		fairQueue:         fl.spec.(*fairSpec).acquireKeys[1],
		fairTimeout:       fl.spec.(*fairSpec).acquireKeys[2],
		fairWaiterChannel: fl.spec.waitChannel("c:7"),
		rwChannel:         rw.ReadLock().channel,
		rwReadHold:        rr.base + ":c:7:rwlock_timeout:1",
		token:             acquire[len(acquire)-1], // a fenced lock's last key
	}
}

func redissonKeys(name string) lockKeys {
	return lockKeys{
		channel:           redissonPrefixName("redisson_lock__channel", name),
		fairQueue:         redissonPrefixName("redisson_lock_queue", name),
		fairTimeout:       redissonPrefixName("redisson_lock_timeout", name),
		fairWaiterChannel: redissonPrefixName("redisson_lock__channel", name) + ":c:7",
		rwChannel:         redissonPrefixName("redisson_rwlock", name),
		rwReadHold:        redissonSuffixName(name, "c:7:rwlock_timeout") + ":1",
		token:             redissonPrefixName("redisson_lock_token", name),
	}
}

// For every name, relock's keys and channels are Redisson's, or the name is refused: exactly the names
// for which Redisson's rule puts a key in another slot than the lock's.
func TestNamesAreRedissons(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refused bool
		channel string // Redisson's release channel, spelled out
	}{
		{"a", false, "redisson_lock__channel:{a}"},
		{"{a}", false, "redisson_lock__channel:{a}"},
		{"a{b}", false, "redisson_lock__channel:a{b}"},
		{"{a}b", false, "redisson_lock__channel:{a}b"},
		{"a{b}c", false, "redisson_lock__channel:a{b}c"},
		{"{a}{b}", false, "redisson_lock__channel:{a}{b}"},
		{"orders{eu}", false, "redisson_lock__channel:orders{eu}"},
		{"a:b/c d", false, "redisson_lock__channel:{a:b/c d}"},
		{"{}a", true, ""},
		{"a{", true, ""},
		{"a{}", true, ""},
		{"a{b", true, ""},
		{"{}{a}", true, ""},
		{"a}", true, ""},
		{"a}b", true, ""},
		{"}", true, ""},
		{"", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := redissonKeys(tc.name)
			sameSlot := tc.name != ""
			for _, k := range []string{want.channel, want.fairQueue, want.fairTimeout, want.fairWaiterChannel,
				want.rwChannel, want.rwReadHold, want.token} {
				sameSlot = sameSlot && slotOf(k) == slotOf(tc.name)
			}
			if sameSlot == tc.refused {
				t.Fatalf("table says refused=%v, but Redisson's keys %+v in the name's slot: %v", tc.refused, want, sameSlot)
			}
			if validName(tc.name) == tc.refused {
				t.Fatalf("validName(%q) = %v, want %v", tc.name, tc.refused, !tc.refused)
			}
			if tc.refused {
				return
			}
			if want.channel != tc.channel {
				t.Fatalf("Redisson's channel %q, table says %q", want.channel, tc.channel)
			}
			if got := relockKeys(tc.name); got != want {
				t.Fatalf("relock's keys differ from Redisson's:\n relock   %+v\n redisson %+v", got, want)
			}
		})
	}
}

// slotOf is Redis's key hash slot rule, restated: the content of the first "{...}" if it is not empty,
// else the whole key.
func slotOf(key string) string {
	if i := strings.Index(key, "{"); i >= 0 {
		if j := strings.Index(key[i+1:], "}"); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}
