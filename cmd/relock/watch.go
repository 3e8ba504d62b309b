package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
	"github.com/relock-go/relock"
)

// watch is event-driven. One dedicated connection, on the node holding the lock's slot, subscribes to
//
//   - the keyspace notifications of the lock key and of its queues (__keyspace@<db>__:<key>), when the
//     server sends them (notify-keyspace-events has K and the classes g, h and x, or A);
//   - the lock's release channels, as relock and Redisson publish on them (docs/redisson.md):
//     redisson_lock__channel:<base> (RLock), the FairLock waiters' channels
//     redisson_lock__channel:<base>:<owner> (a pattern), and redisson_rwlock:<base> (ReadWriteLock); with
//     SSUBSCRIBE too on a cluster whose releases may be sharded.
//
// Everything arrives in order on that one connection. Each event, or burst of events that arrived
// together, is followed by one read of the lock's state (Client.Inspect, one script), and printed with it.
// With notifications, the lock key's own events say what happened: a hash write on a free lock is an
// acquisition, del a release, expired an expiry, and the state read after them says by whom (see
// onKeyspace). Without them, release messages are printed as they come, and the state is read every
// --interval to see acquisitions.

// watchEventJSON is one line of `watch --json` (newline-delimited JSON): one event, and the lock's state
// read after it. Field names are stable; docs/command.md documents them.
type watchEventJSON struct {
	Time    time.Time `json:"time"`              // when the event reached watch (UTC)
	Event   string    `json:"event"`             // what happened: see the watchEv constants
	Text    string    `json:"text"`              // the line watch prints without --json
	Source  string    `json:"source"`            // what told watch: see the src constants
	Trigger string    `json:"trigger,omitempty"` // the keyspace event ("hset", "del", ...) or "<channel> <message>"
	Owners  []string  `json:"owners,omitempty"`  // the owner fields the event is about, when known
	State   *lockJSON `json:"state,omitempty"`   // the state read after the event
	Error   string    `json:"error,omitempty"`   // for event "error": what failed
}

// The events of watch --json.
const (
	watchEvStart          = "watching"                // the first line: the state when watch started
	watchEvAcquired       = "acquired"                // an owner took the lock (or a read hold of a free read-write lock)
	watchEvReentered      = "reentered"               // a holder's hold count went up
	watchEvPartlyReleased = "partly_released"         // a holder's hold count went down, not to 0
	watchEvReleased       = "released"                // a holder let go of the lock (its last hold)
	watchEvExpired        = "expired"                 // the lock key expired: its holders' TTL ran out
	watchEvMode           = "mode_changed"            // a read-write lock went from read to write mode, or back
	watchEvQueueJoined    = "queue_joined"            // an owner joined the fair queue or the priority writers
	watchEvQueueLeft      = "queue_left"              // an owner left the queue (took the lock, gave up, dropped)
	watchEvFencing        = "fencing_token"           // without notifications: the token moved past unseen holds
	watchEvFencingBack    = "fencing_token_went_back" // an alarm: the fencing counter went down (Redis lost it)
	watchEvDisappeared    = "disappeared"             // a hold ended without a release watch saw (see changes)
	watchEvChanged        = "changed"                 // another change of the lock key (rename, persist...)
	watchEvError          = "error"                   // Redis failed; watch goes on and says when it is back
)

// The sources of watch --json events.
const (
	srcStart    = "start"           // the first reading
	srcKeyspace = "keyspace"        // a keyspace notification
	srcMessage  = "release_message" // a message on one of the lock's release channels
	srcPoll     = "poll"            // a periodic reading (no notifications, or while resubscribing)
	srcResync   = "resync"          // the reading after (re)subscribing: what changed meanwhile
)

func runWatch(ctx context.Context, e env) error {
	var c common
	fs := newFlags("watch", "watch [flags] NAME", e)
	c.register(fs, 5*time.Second)
	interval := fs.Duration("interval", 100*time.Millisecond, "without keyspace notifications, how often to read the lock's state to see acquisitions (releases come as messages)")
	until := fs.Duration("for", 0, "stop after this `duration` (0: until interrupted)")
	enable := fs.Bool("enable-notifications", false, "turn on keyspace notifications on the lock's Redis node (CONFIG SET notify-keyspace-events) if they are off; watch says what it set")
	name, err := parseName(fs, e.args)
	if err != nil {
		return err
	}
	if *interval <= 0 || *until < 0 {
		return fmt.Errorf("%w: --interval must be positive and --for not negative", errUsage)
	}
	o, err := c.redisOption()
	if err != nil {
		return err
	}
	if *until > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *until)
		defer cancel()
	}
	lc, rdb, closeAll, err := c.connect(ctx, nil)
	if err != nil {
		return err
	}
	defer closeAll()

	w := &watcher{e: e, c: &c, name: name, lc: lc, interval: *interval, enc: json.NewEncoder(e.stdout),
		spec: newWatchSpec(name, o.SelectDB), unseen: true}
	// The first read must work (a wrong name or address is an error); later, Redis may come and go.
	pctx, cancel := c.withTimeout(ctx)
	st, err := lc.Inspect(pctx, name)
	cancel()
	if err != nil {
		if ctxOver(ctx) {
			return nil
		}
		return lockError(&c, name, err)
	}
	w.prev, w.held, w.known, w.mode, w.unnamed = st, st.Locked, st.Holders, st.Mode, nil
	w.emit(time.Now(), srcStart, "", watchEvStart, fmt.Sprintf("watching lock %q (Ctrl-C stops)", name), nil, &st)

	q := newWatchQueue()
	w.q = q
	subDone := make(chan struct{})
	sharded := rdb.Mode() == rueidis.ClientModeCluster && strings.ToLower(c.sharded) != "off"
	go func() {
		defer close(subDone)
		subscribeLoop(ctx, rdb, &c, w.spec, sharded, *enable, q)
	}()
	defer func() { <-subDone }()

	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-q.ready:
			items := q.take()
			for len(items) > 0 {
				if ctx.Err() != nil {
					return nil
				}
				// Keyspace events that came together (one script makes several) are read once, together.
				n := 1
				if w.notify && items[0].kind == itemKeyspace {
					for n < len(items) && items[n].kind == itemKeyspace {
						n++
					}
					w.onKeyspace(ctx, items[:n])
				} else {
					w.handle(ctx, items[0])
				}
				items = items[n:]
			}
		case <-tick.C:
			if !w.notify || !w.subscribed || w.unseen {
				w.poll(ctx)
			}
		}
	}
}

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
	// FairLock's waiters need the command's additions (docs/operations.md's ACL): without them watch says so and goes on.
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

// watcher turns what the subscription reports into lines.
type watcher struct {
	e        env
	c        *common
	q        *watchQueue
	name     string
	lc       *relock.Client
	interval time.Duration
	enc      *json.Encoder
	spec     watchSpec

	notify     bool   // keyspace notifications come: they drive the lines
	subscribed bool   // the subscription is up
	told       string // the last thing said on stderr about notifications
	failing    string // the last error printed (printed once until things work again)
	prev       relock.LockState
	// held and known follow the lock key's events: whether the lock is held, and its holders as last read
	// while held (who a del or an expiry is about).
	held  bool
	known []relock.Holder
	mode  string // the mode of a held read-write lock, as last read
	// unnamed is an acquisition whose events came, not reported yet: a reading that is not ahead of the
	// events names its holder, or its release (del, expired) reports it without.
	unnamed *watchItem
	// polledRelease is when a periodic reading, without notifications, reported a release whose message
	// had not come yet: the message, when it comes soon after, announces that release, not another.
	polledRelease time.Time
	// unseen is set while releases may have gone unseen since the last reading: from the start until a
	// reading made once subscribed, and again from each loss of the subscription. What ended then is not
	// said to be released (see changes).
	unseen bool
}

// read reads the lock's state; on an error it prints it (once) and returns false.
func (w *watcher) read(ctx context.Context) (relock.LockState, bool) {
	pctx, cancel := w.c.withTimeout(ctx)
	st, err := w.lc.Inspect(pctx, w.name)
	cancel()
	switch {
	case ctxOver(ctx):
		return st, false
	case err != nil:
		if msg := lockError(w.c, w.name, err).Error(); msg != w.failing {
			w.failing = msg
			w.emitError(time.Now(), msg)
		}
		return st, false
	}
	w.failing = ""
	return st, true
}

func (w *watcher) emitError(at time.Time, msg string) {
	if w.c.json {
		_ = w.enc.Encode(watchEventJSON{Time: at.UTC(), Event: watchEvError, Text: msg, Error: msg})
		return
	}
	fmt.Fprintf(w.e.stdout, "%s  %s\n", at.Format("15:04:05.000"), msg)
}

func (w *watcher) emit(at time.Time, source, trigger, event, text string, owners []string, st *relock.LockState) {
	if w.c.json {
		ev := watchEventJSON{Time: at.UTC(), Event: event, Text: text, Source: source, Trigger: trigger, Owners: owners}
		if st != nil {
			j := toJSON(*st)
			ev.State = &j
		}
		_ = w.enc.Encode(ev)
		return
	}
	line := at.Format("15:04:05.000") + "  " + text
	if st != nil {
		line += "  | now: " + nowText(*st)
	}
	fmt.Fprintln(w.e.stdout, line)
}

func (w *watcher) emitAll(at time.Time, source, trigger string, chs []change, st *relock.LockState) {
	for _, ch := range chs {
		w.emit(at, source, trigger, ch.event, ch.text, ch.owners, st)
		if ch.event == watchEvFencingBack {
			w.say(ch.text) // an alarm: on stderr too, where it is not lost among the events
		}
	}
}

func (w *watcher) handle(ctx context.Context, it watchItem) {
	switch it.kind {
	case itemSubscribed:
		w.subscribed = true
		w.tell(it.notify)
		if st, ok := w.read(ctx); ok {
			// Releases made while the subscription was down were not seen: what ended meanwhile is not said
			// to be released. (When this reading fails, the next one, a poll, says it.)
			w.emitAll(it.at, srcResync, "", changes(w.prev, st, w.interval, true), &st)
			w.prev, w.held, w.known, w.mode, w.unnamed = st, st.Locked, st.Holders, st.Mode, nil
			w.unseen = false
		}
	case itemLost:
		w.subscribed, w.unseen = false, true
		if it.err != nil {
			if msg := "subscription lost: " + redisError(w.c.redis, it.err).Error(); msg != w.failing {
				w.failing = msg
				w.emitError(it.at, msg)
			}
		}
	case itemKeyspace:
		if !w.notify && it.key == w.spec.lock {
			// CONFIG GET could not tell, but notifications come: use them from now on.
			w.notify = true
			w.say("keyspace notifications arrive after all: every change of the lock is reported from now on")
		}
		if w.notify {
			w.onKeyspace(ctx, []watchItem{it})
		} else {
			w.onQueueEvent(ctx, it)
		}
	case itemMessage:
		if !w.notify {
			w.onRelease(ctx, it)
		}
		// With notifications, the lock key's del already reported the release this message announces.
	}
}

// tell says on stderr how watch learns of changes, when that changes.
func (w *watcher) tell(s notifyStatus) {
	w.notify = s.on
	var msg string
	switch {
	case s.on && s.enable:
		msg = fmt.Sprintf("enabled keyspace notifications on %s: %s", s.addr, s.note)
	case s.on:
		msg = "" // the normal case: nothing to say
	default:
		msg = fmt.Sprintf("keyspace notifications are not enabled on %s (%s): watching release messages, and reading the lock every %s for acquisitions, so holds shorter than that are seen only when released; --enable-notifications turns them on (CONFIG SET notify-keyspace-events Kghx)", s.addr, s.note, w.interval)
	}
	if msg != w.told {
		w.told = msg
		if msg != "" {
			w.say(msg)
		}
	}
}

func (w *watcher) say(msg string) {
	fmt.Fprintf(w.e.stderr, "relock watch: %s\n", msg)
}

// poll reads the state and prints what changed since the last reading.
func (w *watcher) poll(ctx context.Context) {
	st, ok := w.read(ctx)
	if !ok {
		return
	}
	chs := changes(w.prev, st, w.interval, w.unseen)
	if slices.ContainsFunc(chs, isRelease) {
		w.polledRelease = time.Now()
	}
	w.emitAll(time.Now(), srcPoll, "", chs, &st)
	w.prev, w.held, w.known, w.mode, w.unnamed = st, st.Locked, st.Holders, st.Mode, nil
	w.unseen = !w.subscribed
}

func isRelease(ch change) bool { return ch.event == watchEvReleased }

// onRelease handles a release message without notifications: a release happened, whether or not the
// holder was seen.
func (w *watcher) onRelease(ctx context.Context, it watchItem) {
	st, ok := w.read(ctx)
	if !ok {
		return
	}
	trigger := it.channel + " " + it.event
	chs := changes(w.prev, st, w.interval, w.unseen)
	polled := w.polledRelease
	w.polledRelease = time.Time{}
	switch {
	case w.unseen:
		// The last reading is from before a gap in the subscription: the holders it saw may have gone
		// unreleased, and the release announced is of a holder watch did not see.
		chs = append(chs, releasedBy(nil, "its holder was not seen")...)
	case slices.ContainsFunc(chs, isRelease):
	case !polled.IsZero() && it.at.Sub(polled) < max(2*w.interval, 50*time.Millisecond):
		// A reading already reported the release this message announces (it came between the release and
		// its message): report only what changed since.
	default:
		// The holder released, and the lock was taken again (or it was never seen): say so, then what the
		// reading shows beyond it.
		free := w.prev
		free.Holders, free.Locked, free.Mode = nil, false, ""
		chs = append(releasedBy(w.prev.Holders, "its holder was not seen: acquired and released between two readings"), changes(free, st, w.interval, false)...)
	}
	w.emitAll(it.at, srcMessage, trigger, chs, &st)
	w.prev, w.held, w.known, w.mode, w.unnamed = st, st.Locked, st.Holders, st.Mode, nil
	w.unseen = false
}

// onQueueEvent handles an event on a queue key: who joined or left it.
func (w *watcher) onQueueEvent(ctx context.Context, it watchItem) {
	st, ok := w.read(ctx)
	if !ok {
		return
	}
	w.emitAll(it.at, srcKeyspace, it.event, queueChanges(w.prev, st), &st)
	w.prev.Queue, w.prev.QueueLen = st.Queue, st.QueueLen
}

// onKeyspace handles keyspace notifications that came together, with notifications on. The events say
// what happened, in order: a hash write on a free lock is an acquisition, del a release, expired an
// expiry. One reading, after them, says by whom: it names the holders of the last acquisition, and the
// hold counts, readers and queue as they are then. An acquisition followed in the same run by its release
// is reported without its holder (it was gone before it could be read); so is everything when more events
// came during the reading (the reading is then ahead of the events).
func (w *watcher) onKeyspace(ctx context.Context, items []watchItem) {
	st, ok := w.read(ctx)
	if !ok {
		return
	}
	current := !w.q.pending()
	last := items[len(items)-1]
	acquiredAt := w.unnamed // an acquisition not reported yet: its holder is named by a current reading
	for i := range items {
		it := &items[i]
		if it.key != w.spec.lock {
			continue
		}
		switch it.event {
		case "hset", "hsetnx", "hincrby", "hincrbyfloat", "hmset":
			if !w.held {
				w.held, w.known, acquiredAt = true, nil, &watchItem{at: it.at, event: it.event}
			}
		case "del", "expired":
			if !w.held {
				continue
			}
			if acquiredAt != nil {
				w.emit(acquiredAt.at, srcKeyspace, acquiredAt.event, watchEvAcquired, "lock acquired (and released before it could be read: holder not seen)", nil, &st)
				acquiredAt = nil
			}
			var chs []change
			if it.event == "del" {
				chs = releasedBy(w.known, "its holder was not seen")
			} else {
				chs = []change{expiredChange(w.known)}
			}
			w.emitAll(it.at, srcKeyspace, it.event, chs, &st)
			w.held, w.known, w.mode, w.unnamed = false, nil, "", nil
		case "hdel", "expire", "pexpire", "persist":
			// A reader leaving or a hold count moving (told by the reading below), a renewal, a TTL set by an
			// acquisition: nothing of its own to print.
		default:
			w.emit(it.at, srcKeyspace, it.event, watchEvChanged, "lock key: "+it.event, nil, &st)
		}
	}
	var chs []change
	switch {
	case !w.held:
	case !current || !st.Locked:
		// The reading is ahead of the events, or the lock is being released (its del is on its way): the
		// next events tell. An acquisition waits for them to be named.
		w.unnamed = acquiredAt
		acquiredAt = nil
	case acquiredAt != nil:
		for _, h := range st.Holders {
			chs = append(chs, acquiredChange(h))
		}
		w.known, w.mode, w.unnamed = st.Holders, st.Mode, nil
	default:
		if w.mode != "" && st.Mode != "" && w.mode != st.Mode {
			chs = append(chs, change{watchEvMode, fmt.Sprintf("mode: %s -> %s", w.mode, st.Mode), nil})
		}
		chs = append(chs, holderChanges(w.known, st.Holders)...)
		w.known, w.mode = st.Holders, st.Mode
	}
	at, trigger := last.at, last.event
	if acquiredAt != nil {
		at, trigger = acquiredAt.at, acquiredAt.event
	}
	if current {
		chs = append(chs, queueChanges(w.prev, st)...)
		w.prev.Queue, w.prev.QueueLen = st.Queue, st.QueueLen
	}
	if st.FencingToken < w.prev.FencingToken {
		chs = append(chs, fencingBack(w.prev.FencingToken, st.FencingToken))
	}
	w.emitAll(at, srcKeyspace, trigger, chs, &st)
	w.prev.Kind, w.prev.Locked, w.prev.Holders, w.prev.TTL, w.prev.FencingToken, w.prev.Mode = st.Kind, st.Locked, st.Holders, st.TTL, st.FencingToken, st.Mode
}

// change is one line of watch's output.
type change struct {
	event, text string
	owners      []string
}

func acquiredChange(h relock.Holder) change {
	return change{watchEvAcquired, fmt.Sprintf("%s acquired by %s (hold count %d, TTL %s)", holdWhat(h.Mode), ownerText(h.ClientID, h.Token), h.Count, fmtTTL(h.TTL)), []string{h.Owner}}
}

// releasedBy is the release of holders (the lock's last hold of each), or, with none known, of an
// unknown holder (unseen says why).
func releasedBy(holders []relock.Holder, unseen string) []change {
	if len(holders) == 0 {
		return []change{{watchEvReleased, "lock released (" + unseen + ")", nil}}
	}
	var out []change
	for _, h := range holders {
		out = append(out, change{watchEvReleased, fmt.Sprintf("%s released by %s", holdWhat(h.Mode), ownerText(h.ClientID, h.Token)), []string{h.Owner}})
	}
	return out
}

func expiredChange(holders []relock.Holder) change {
	if len(holders) == 0 {
		return change{watchEvExpired, "lock expired: its TTL ran out (holder not seen)", nil}
	}
	var who, owners []string
	for _, h := range holders {
		who = append(who, ownerText(h.ClientID, h.Token))
		owners = append(owners, h.Owner)
	}
	return change{watchEvExpired, "lock expired: the hold of " + strings.Join(who, ", ") + " ran out of TTL", owners}
}

// vanished reports whether some of before is not in after.
func vanished(before, after []relock.Holder) bool {
	for _, h := range before {
		if !slices.ContainsFunc(after, func(a relock.Holder) bool { return a.Owner == h.Owner }) {
			return true
		}
	}
	return false
}

// holderChanges describes how the holders went from a to b: releases first, then acquisitions and
// hold counts moving.
func holderChanges(a, b []relock.Holder) []change {
	var out []change
	after := map[string]bool{}
	for _, h := range b {
		after[h.Owner] = true
	}
	for _, h := range a {
		if !after[h.Owner] {
			out = append(out, releasedBy([]relock.Holder{h}, "")...)
		}
	}
	before := map[string]relock.Holder{}
	for _, h := range a {
		before[h.Owner] = h
	}
	for _, h := range b {
		what := holdWhat(h.Mode)
		old, held := before[h.Owner]
		switch {
		case !held:
			out = append(out, acquiredChange(h))
		case h.Count > old.Count:
			out = append(out, change{watchEvReentered, fmt.Sprintf("%s re-entered by %s (hold count %d -> %d)", what, ownerText(h.ClientID, h.Token), old.Count, h.Count), []string{h.Owner}})
		case h.Count < old.Count:
			out = append(out, change{watchEvPartlyReleased, fmt.Sprintf("%s partly released by %s (hold count %d -> %d)", what, ownerText(h.ClientID, h.Token), old.Count, h.Count), []string{h.Owner}})
		}
	}
	return out
}

// queueChanges describes who joined and left the queue from a to b.
func queueChanges(a, b relock.LockState) []change {
	var out []change
	queued := func(s relock.LockState) []string {
		owners := make([]string, len(s.Queue))
		for i, w := range s.Queue {
			owners[i] = w.Owner
		}
		return owners
	}
	qa, qb := queued(a), queued(b)
	for _, w := range b.Queue {
		if !slices.Contains(qa, w.Owner) {
			out = append(out, change{watchEvQueueJoined, fmt.Sprintf("%s joined the queue (position %d)", ownerText(w.ClientID, w.Token), slices.Index(qb, w.Owner)+1), []string{w.Owner}})
		}
	}
	for _, w := range a.Queue {
		if !slices.Contains(qb, w.Owner) {
			out = append(out, change{watchEvQueueLeft, fmt.Sprintf("%s left the queue", ownerText(w.ClientID, w.Token)), []string{w.Owner}})
		}
	}
	return out
}

// changes describes what changed from reading a to reading b, ignoring the passing of time (TTLs going
// down, renewals). interval is how far apart the two readings may be. unseen says that watch could not
// have seen a release between them (its subscription was down): a holder gone since a is then not said
// to be released.
//
// A fencing counter lower in b than in a means that Redis lost the lock's keys (a restart without
// persistence, a failover to a replica that had not received them) or that someone deleted them: that is
// an alarm, and the holders gone with it disappeared without a release.
func changes(a, b relock.LockState, interval time.Duration, unseen bool) []change {
	var out []change
	after := map[string]bool{}
	for _, h := range b.Holders {
		after[h.Owner] = true
	}
	lost := b.FencingToken < a.FencingToken
	// Releases first, then what took their place.
	for _, h := range a.Holders {
		if after[h.Owner] {
			continue
		}
		ch := releasedBy([]relock.Holder{h}, "")[0]
		what := holdWhat(h.Mode) + " of " + ownerText(h.ClientID, h.Token)
		switch {
		case lost:
			ch.event = watchEvDisappeared
			ch.text = what + " disappeared without a release: Redis lost it (its fencing counter went back too)"
		case unseen:
			ch.event = watchEvDisappeared
			ch.text = what + " disappeared while watch was not subscribed, with no release seen: it was released or " +
				"expired meanwhile, or Redis lost it (a restart without persistence, a failover)"
		case h.TTL >= 0 && h.TTL <= 2*interval:
			ch.text = fmt.Sprintf("%s ended: released, or expired (its TTL was %s)", what, fmtTTL(h.TTL))
		}
		out = append(out, ch)
	}
	if a.Kind != b.Kind && b.Kind != relock.KindNone && a.Kind != relock.KindNone {
		out = append(out, change{watchEvChanged, fmt.Sprintf("kind: %s -> %s", kindTitle(a.Kind), kindTitle(b.Kind)), nil})
	}
	if a.Mode != b.Mode && a.Mode != "" && b.Mode != "" {
		out = append(out, change{watchEvMode, fmt.Sprintf("mode: %s -> %s", a.Mode, b.Mode), nil})
	}
	var kept []relock.Holder
	for _, h := range a.Holders {
		if after[h.Owner] {
			kept = append(kept, h)
		}
	}
	out = append(out, holderChanges(kept, b.Holders)...)
	out = append(out, queueChanges(a, b)...)
	switch {
	case lost:
		out = append(out, fencingBack(a.FencingToken, b.FencingToken))
	case b.FencingToken > a.FencingToken:
		text := fmt.Sprintf("fencing token %d -> %d", a.FencingToken, b.FencingToken)
		if n := b.FencingToken - a.FencingToken; n > 1 {
			text += fmt.Sprintf(" (%d fenced acquisitions since the last reading)", n)
		}
		out = append(out, change{watchEvFencing, text, nil})
	}
	return out
}

// fencingBack is the alarm for a fencing counter that went down, from a to b: relock and Redisson only
// ever increment it, so Redis lost it, or someone deleted it.
func fencingBack(a, b uint64) change {
	return change{watchEvFencingBack, fmt.Sprintf("ALARM: the fencing token went back from %d to %d: Redis lost the lock's "+
		"fencing counter (a restart without persistence, a failover to a replica that had not received it, or a "+
		"deletion). Tokens handed out from now on repeat ones already used: a store that checks them may refuse "+
		"the new holders' writes, or accept those of a holder that lost the lock", a, b), nil}
}

// nowText is the state after an event, naming the holders.
func nowText(st relock.LockState) string {
	if !st.Locked {
		s := "free"
		if st.QueueLen > 0 {
			s += fmt.Sprintf(", %d waiting", st.QueueLen)
		}
		if st.FencingToken > 0 {
			s += fmt.Sprintf(", fencing token %d", st.FencingToken)
		}
		return s
	}
	var who []string
	for _, h := range st.Holders {
		s := ownerText(h.ClientID, h.Token)
		if h.Mode != "" {
			s = h.Mode + ": " + s
		}
		who = append(who, fmt.Sprintf("%s ×%d", s, h.Count))
	}
	s := fmt.Sprintf("held by %s, TTL %s", strings.Join(who, "; "), fmtTTL(st.TTL))
	if st.QueueLen > 0 {
		s += fmt.Sprintf(", %d waiting", st.QueueLen)
	}
	if st.FencingToken > 0 {
		s += fmt.Sprintf(", fencing token %d", st.FencingToken)
	}
	return s
}

func holdWhat(mode string) string {
	switch mode {
	case "read":
		return "read lock"
	case "write":
		return "write lock"
	}
	return "lock"
}
