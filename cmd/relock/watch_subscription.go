package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// The subscription watch learns of changes from (see watch.go): what it subscribes to for a lock, the
// dedicated connection that holds the subscription, and the queue that hands what arrives to the main loop.

// namedMessage is what relock publishes on a lock's release channel, before the unlock message ("0",
// Redisson's), when the release woke a relock waiter by name (the library's lua/lib/waiters.lua).
const namedMessage = "-1"

// watchSpec is what watch subscribes to for one lock.
type watchSpec struct {
	lock, queue, writers string // the lock key, a FairLock's queue, a ReadWriteLock's priority writers
	keyspace             string // the keyspace notification channels' prefix: "__keyspace@<db>__:"
	lockChannel          string // RLock (and FairLock with nobody queued: nothing is published then)
	rwChannel            string // ReadWriteLock
	fairPattern          string // FairLock waiters' channels
}

// lockBase is a lock's companions' suffix, by Redisson's rule (the library's nameBase, names.go):
// "{name}", or the name itself when it contains "{".
func lockBase(name string) string {
	if strings.Contains(name, "{") {
		return name
	}
	return "{" + name + "}"
}

// globEscape escapes the characters PSUBSCRIBE patterns give a meaning to.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func newWatchSpec(name string, db int) watchSpec {
	base := lockBase(name)
	return watchSpec{lock: name, queue: "redisson_lock_queue:" + base, writers: "relock_rwlock_writers:" + base,
		keyspace:    "__keyspace@" + strconv.Itoa(db) + "__:",
		lockChannel: "redisson_lock__channel:" + base, rwChannel: "redisson_rwlock:" + base,
		fairPattern: globEscape("redisson_lock__channel:"+base) + ":*"}
}

// watchItem is one thing the subscription reported, in the order it came.
type watchItem struct {
	at      time.Time
	kind    int    // itemKeyspace, itemMessage, itemSubscribed, itemLost
	key     string // itemKeyspace: the key
	event   string // itemKeyspace: the event; itemMessage: the message
	channel string // itemMessage
	err     error  // itemLost
	notify  notifyStatus
}

const (
	itemKeyspace = iota
	itemMessage
	itemSubscribed
	itemLost
)

// notifyStatus is what CONFIG GET notify-keyspace-events said on the lock's node.
type notifyStatus struct {
	on     bool
	note   string // why they are off or unknown, or what --enable-notifications set
	addr   string
	enable bool // --enable-notifications set them
}

// watchQueue passes items from the subscription's connection to the main loop without ever blocking the
// connection's reader (which would hold up the replies of that connection) and without dropping any.
type watchQueue struct {
	ready chan struct{}
	mu    sync.Mutex
	items []watchItem
}

func newWatchQueue() *watchQueue {
	return &watchQueue{ready: make(chan struct{}, 1)}
}

func (q *watchQueue) push(it watchItem) {
	q.mu.Lock()
	q.items = append(q.items, it)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// pending reports whether a keyspace event waits in the queue.
func (q *watchQueue) pending() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.ContainsFunc(q.items, func(it watchItem) bool { return it.kind == itemKeyspace })
}

func (q *watchQueue) take() []watchItem {
	q.mu.Lock()
	items := q.items
	q.items = nil
	q.mu.Unlock()
	return items
}

// subscribeLoop keeps the subscription up until ctx ends, reporting each (re)subscription and each loss.
func subscribeLoop(ctx context.Context, rdb rueidis.Client, c *common, spec watchSpec, sharded, enable bool, q *watchQueue) {
	backoff := 50 * time.Millisecond
	for {
		subscribed, err := subscribeOnce(ctx, rdb, c, spec, sharded, enable, q)
		if ctx.Err() != nil {
			return
		}
		if subscribed {
			backoff = 50 * time.Millisecond
		}
		q.push(watchItem{at: time.Now(), kind: itemLost, err: err})
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// subscribeOnce subscribes on one dedicated connection and returns when it breaks (or ctx ends).
func subscribeOnce(ctx context.Context, rdb rueidis.Client, c *common, spec watchSpec, sharded, enable bool, q *watchQueue) (bool, error) {
	dc, _ := rdb.Dedicate()
	defer dc.Close() // closes the subscribed connection (a released one would go back to the pool), and releases it
	ksLock, ksQueue, ksWriters := spec.keyspace+spec.lock, spec.keyspace+spec.queue, spec.keyspace+spec.writers
	wait := dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(m rueidis.PubSubMessage) {
		it := watchItem{at: time.Now(), kind: itemMessage, channel: m.Channel, event: m.Message}
		switch m.Channel {
		case ksLock, ksQueue, ksWriters:
			it.kind, it.key = itemKeyspace, strings.TrimPrefix(m.Channel, spec.keyspace)
		}
		q.push(it)
	}})
	cctx, cancel := c.withTimeout(ctx)
	defer cancel()
	// A keyed command first: on a cluster it binds the connection to the node holding the lock's slot,
	// whose keyspace notifications are the lock's.
	if err := dc.Do(cctx, dc.B().Exists().Key(spec.lock).Build()).Error(); err != nil {
		return false, err
	}
	st := checkNotifications(cctx, dc, enable)
	st.addr = redactURL(c.redis)
	// The release channels are what the library's ACL grants; the keyspace channels and the pattern of a
	// FairLock's waiters need the command's additions (docs/operations.md's ACL): without them watch says so
	// and goes on.
	if err := dc.Do(cctx, dc.B().Subscribe().Channel(spec.lockChannel, spec.rwChannel).Build()).Error(); err != nil {
		return false, err
	}
	if err := dc.Do(cctx, dc.B().Subscribe().Channel(ksLock, ksQueue, ksWriters).Build()).Error(); err != nil {
		if !noPerm(err) {
			return false, err
		}
		st.on, st.enable = false, false
		st.note = fmt.Sprintf("this Redis user may not subscribe to the lock's keyspace channels (%v)", err)
	}
	if err := dc.Do(cctx, dc.B().Psubscribe().Pattern(spec.fairPattern).Build()).Error(); err != nil {
		if !noPerm(err) {
			return false, err
		}
		st.note = strings.TrimPrefix(st.note+"; ", "; ") +
			fmt.Sprintf("a FairLock's releases to its waiters are not watched: this Redis user may not PSUBSCRIBE (%v)", err)
	}
	if sharded {
		// Releases announced with SPUBLISH (Options.ShardedPubSub); an error (Redis 6) means there are none.
		_ = dc.Do(cctx, dc.B().Ssubscribe().Channel(spec.lockChannel, spec.rwChannel).Build()).Error()
	}
	q.push(watchItem{at: time.Now(), kind: itemSubscribed, notify: st})
	select {
	case err := <-wait:
		if err == nil {
			err = fmt.Errorf("the subscription's connection closed")
		}
		return true, err
	case <-ctx.Done():
		return true, nil
	}
}

// noPerm reports whether err is Redis refusing a command for the user's ACL.
func noPerm(err error) bool {
	rerr, ok := rueidis.IsRedisErr(err)
	return ok && strings.HasPrefix(rerr.Error(), "NOPERM")
}

// notificationsOn reports whether notify-keyspace-events flags send what watch needs: keyspace events (K)
// of the generic (g: del, expire), hash (h) and expired (x) classes; "A" stands for all classes.
func notificationsOn(flags string) bool {
	if !strings.Contains(flags, "K") {
		return false
	}
	return strings.Contains(flags, "A") || strings.Contains(flags, "g") && strings.Contains(flags, "h") && strings.Contains(flags, "x")
}

// checkNotifications reads notify-keyspace-events, and with enable, turns on what watch needs (plus list
// and sorted-set events, for the queues) when it is off.
func checkNotifications(ctx context.Context, dc rueidis.DedicatedClient, enable bool) notifyStatus {
	m, err := dc.Do(ctx, dc.B().ConfigGet().Parameter("notify-keyspace-events").Build()).AsStrMap()
	if err != nil {
		return notifyStatus{note: fmt.Sprintf("CONFIG GET notify-keyspace-events failed (%v), so whether they are on is unknown", err)}
	}
	flags := m["notify-keyspace-events"]
	if notificationsOn(flags) {
		return notifyStatus{on: true}
	}
	if !enable {
		return notifyStatus{note: fmt.Sprintf("notify-keyspace-events is %q", flags)}
	}
	set := flags
	for _, f := range "Kghxlz" {
		if !strings.ContainsRune(set, f) && !(f != 'K' && strings.Contains(set, "A")) {
			set += string(f)
		}
	}
	if err := dc.Do(ctx, dc.B().ConfigSet().ParameterValue().ParameterValue("notify-keyspace-events", set).Build()).Error(); err != nil {
		return notifyStatus{note: fmt.Sprintf("notify-keyspace-events is %q, and CONFIG SET failed: %v", flags, err)}
	}
	return notifyStatus{on: true, enable: true, note: fmt.Sprintf("CONFIG SET notify-keyspace-events %q (it was %q; it stays so after watch ends: set it back with CONFIG SET notify-keyspace-events %q)", set, flags, flags)}
}
