package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
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
		// With notifications, the lock key's del already reported the release this message announces. A
		// named message (relock's, for a waiter it woke by name) is always followed, in the same script,
		// by the unlock message of the same release: that one reports it.
		if !w.notify && it.event != namedMessage {
			w.onRelease(ctx, it)
		}
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
