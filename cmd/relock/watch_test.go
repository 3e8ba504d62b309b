package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
	"go.uber.org/goleak"
)

// syncBuffer is a bytes.Buffer that a command writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// parseWatch parses the output of watch --json.
func parseWatch(t *testing.T, out string) []watchEventJSON {
	t.Helper()
	var evs []watchEventJSON
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var ev watchEventJSON
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("watch --json line %q: %v", line, err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// inProcessWatch runs watch in this process (under the race detector when it is on); stop ends it and
// returns its stdout, stderr and exit status, failing t if it does not end within 10 s.
func inProcessWatch(t *testing.T, args ...string) (stdout, stderr *syncBuffer, stop func() int) {
	t.Helper()
	stdout, stderr = &syncBuffer{}, &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, env{args: append([]string{"watch"}, args...), stdin: strings.NewReader(""), stdout: stdout, stderr: stderr})
	}()
	return stdout, stderr, func() int {
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(10 * time.Second):
			t.Fatalf("watch did not end within 10 s of being stopped\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
			return -1
		}
	}
}

// waitSubscribed waits (10 s at most) until someone subscribes to channel.
func waitSubscribed(t *testing.T, raw rueidis.Client, channel string) {
	t.Helper()
	waitFor(t, func() bool {
		m, err := raw.Do(context.Background(), raw.B().PubsubNumsub().Channel(channel).Build()).AsIntMap()
		return err == nil && m[channel] > 0
	})
}

// waitOutput waits (10 s at most) until out holds n lines that contain s.
func waitOutput(t *testing.T, out *syncBuffer, s string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(out.String(), s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("watch printed %q %d times within 10 s, want %d:\n%s", s, strings.Count(out.String(), s), n, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func rawClient(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	raw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// holdsOf1ms takes and releases lock name n times, holding it 1 ms each time.
func holdsOf1ms(t *testing.T, c *relock.Client, name, owner string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := c.Lock(name, relock.WithFencing())
	o := relock.WithOwner(ctx, owner)
	for i := range n {
		if err := l.Lock(o); err != nil {
			t.Fatalf("hold %d: %v", i, err)
		}
		time.Sleep(time.Millisecond)
		if err := l.Unlock(o); err != nil {
			t.Fatalf("hold %d: %v", i, err)
		}
	}
}

// With keyspace notifications on, watch reports every acquisition and release of 1 ms holds, in order,
// and an expiry.
func TestWatchKeyspaceEvents(t *testing.T) {
	srv := redistest.Start(t)
	leaks := goleak.IgnoreCurrent()
	raw := rawClient(t, srv.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := raw.Do(ctx, raw.B().ConfigSet().ParameterValue().ParameterValue("notify-keyspace-events", "KEA").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	c, err := relock.New([]string{srv.Addr()}, &relock.Options{WatchdogTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const name, holds = "ticks", 50
	stdout, stderr, stop := inProcessWatch(t, name, "--redis", srv.Addr(), "--json")
	waitSubscribed(t, raw, "__keyspace@0__:"+name)

	holdsOf1ms(t, c, name, "quick", holds)
	// One more, left to expire: a lease of 50 ms, never released.
	if err := c.Lock(name).LockWithLease(relock.WithOwner(ctx, "leased"), 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, stdout, `"event":"expired"`, 1)
	code := stop()
	c.Close()
	raw.Close()
	if code != 0 {
		t.Fatalf("watch: exit %d\n%s", code, stderr)
	}
	if s := stderr.String(); s != "" {
		t.Errorf("watch said on stderr, with notifications on: %s", s)
	}

	evs := parseWatch(t, stdout.String())
	var got, want []string
	seen := 0
	for _, ev := range evs {
		switch ev.Event {
		case watchEvAcquired, watchEvReleased, watchEvExpired:
			if ev.Source != srcKeyspace || ev.State == nil {
				t.Errorf("event %+v: want from a keyspace notification, with the state", ev)
			}
			got = append(got, ev.Event)
			if ev.Event == watchEvAcquired && len(ev.Owners) == 1 && strings.HasSuffix(ev.Owners[0], ":quick") {
				seen++
			}
		case watchEvStart:
		default:
			t.Errorf("unexpected event %+v", ev)
		}
	}
	for range holds {
		want = append(want, watchEvAcquired, watchEvReleased)
	}
	want = append(want, watchEvAcquired, watchEvExpired)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("watch reported %d events:\n%s\nwant %d:\n%s\noutput:\n%s", len(got), strings.Join(got, " "), len(want), strings.Join(want, " "), stdout)
	}
	last := evs[len(evs)-1]
	if last.Event != watchEvExpired || len(last.Owners) != 1 || !strings.HasSuffix(last.Owners[0], ":leased") || last.State.Locked {
		t.Errorf("the expiry: %+v", last)
	}
	t.Logf("%d acquisitions and %d releases of 1 ms holds reported in order, %d of them with their holder read", holds, holds, seen)
	goleak.VerifyNone(t, leaks)
}

// Without keyspace notifications, watch says so once on stderr, and still reports every release.
func TestWatchFallbackWithoutNotifications(t *testing.T) {
	srv := redistest.Start(t)
	leaks := goleak.IgnoreCurrent()
	raw := rawClient(t, srv.Addr())
	c, err := relock.New([]string{srv.Addr()}, &relock.Options{WatchdogTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const name, holds = "ticks", 20
	stdout, stderr, stop := inProcessWatch(t, name, "--redis", srv.Addr(), "--json")
	waitSubscribed(t, raw, "redisson_lock__channel:{"+name+"}")
	holdsOf1ms(t, c, name, "quick", holds)
	waitOutput(t, stdout, `"event":"released"`, holds)
	code := stop()
	c.Close()
	raw.Close()
	if code != 0 {
		t.Fatalf("watch: exit %d\n%s", code, stderr)
	}
	if n := strings.Count(stderr.String(), "keyspace notifications are not enabled"); n != 1 ||
		!strings.Contains(stderr.String(), "--enable-notifications") {
		t.Errorf("stderr, want the fallback said once: %s", stderr)
	}
	released := 0
	for _, ev := range parseWatch(t, stdout.String()) {
		if ev.Event == watchEvReleased {
			released++
			if ev.Source != srcMessage && ev.Source != srcPoll {
				t.Errorf("release %+v: want from a release message (or a poll)", ev)
			}
		}
	}
	if released != holds {
		t.Fatalf("%d releases reported, want %d:\n%s", released, holds, stdout)
	}
	goleak.VerifyNone(t, leaks)
}

// Without notifications, a release that wakes a relock waiter publishes two messages (relock's named one,
// then Redisson's unlock message): watch reports the one release once, not a second one of a holder it
// "did not see".
func TestWatchReportsAReleaseOnceWithoutNotifications(t *testing.T) {
	srv := redistest.Start(t)
	leaks := goleak.IgnoreCurrent()
	raw := rawClient(t, srv.Addr())
	a, err := relock.New([]string{srv.Addr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := relock.New([]string{srv.Addr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const name, rounds = "handed", 5
	stdout, stderr, stop := inProcessWatch(t, name, "--redis", srv.Addr(), "--json")
	waitSubscribed(t, raw, "redisson_lock__channel:{"+name+"}")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range rounds {
		first, second := relock.WithOwner(ctx, "first"), relock.WithOwner(ctx, "second")
		if err := a.Lock(name).Lock(first); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() { got <- b.Lock(name).Lock(second) }()
		waitFor(t, func() bool { // the waiter is recorded: the release will name it
			n, err := raw.Do(ctx, raw.B().Zcard().Key("relock_lock_waiters:{"+name+"}").Build()).AsInt64()
			return err == nil && n > 0
		})
		if err := a.Lock(name).Unlock(first); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if err := b.Lock(name).Unlock(second); err != nil {
			t.Fatal(err)
		}
		waitOutput(t, stdout, `"event":"released"`, 2*(i+1))
	}
	time.Sleep(300 * time.Millisecond) // a second report of a release, if any, comes at once
	code := stop()
	a.Close()
	b.Close()
	raw.Close()
	if code != 0 {
		t.Fatalf("watch: exit %d\n%s", code, stderr)
	}
	var released []string
	for _, ev := range parseWatch(t, stdout.String()) {
		if ev.Event == watchEvReleased {
			released = append(released, ev.Text)
		}
	}
	if len(released) != 2*rounds {
		t.Fatalf("%d releases reported for %d: %q\n%s", len(released), 2*rounds, released, stdout)
	}
	goleak.VerifyNone(t, leaks)
}

// --enable-notifications turns them on, and says so; then watch needs no polling.
func TestWatchEnableNotifications(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	raw := rawClient(t, srv.Addr())
	defer raw.Close()
	c := newLockClient(t, []string{srv.Addr()})
	done := startBin("watch", "w", "--redis", srv.Addr(), "--enable-notifications", "--for", "2s")
	waitSubscribed(t, raw, "__keyspace@0__:w")
	holdsOf1ms(t, c, "w", "quick", 3)
	r := <-done
	if r.err != nil || r.code != 0 {
		t.Fatalf("watch: %v, exit %d\n%s", r.err, r.code, r.stderr)
	}
	m, err := raw.Do(testCtx(t), raw.B().ConfigGet().Parameter("notify-keyspace-events").Build()).AsStrMap()
	if err != nil || !notificationsOn(m["notify-keyspace-events"]) {
		t.Fatalf("notify-keyspace-events %q (%v) after --enable-notifications", m["notify-keyspace-events"], err)
	}
	if !strings.Contains(r.stderr, "enabled keyspace notifications on "+srv.Addr()) {
		t.Errorf("stderr: %s", r.stderr)
	}
	if n := strings.Count(r.stdout, "  lock acquired"); n != 3 {
		t.Errorf("%d acquisitions printed, want 3:\n%s", n, r.stdout)
	}
}

// After a restart without persistence, a lock held before it is gone: watch says that it disappeared with
// no release seen, never that its holder released it; and a fencing counter that went back with it is an
// alarm (on stderr too), the holder's disappearance then certain not to be a release.
func TestWatchRestartWithoutPersistence(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		fenced  bool
		notify  bool
		disappr string // what the disappearance says
	}{
		{"fenced", true, false, "disappeared without a release: Redis lost it"},
		{"fenced notifications", true, true, "disappeared without a release: Redis lost it"},
		{"unfenced", false, false, "disappeared while watch was not subscribed, with no release seen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			raw := rawClient(t, srv.Addr())
			defer raw.Close()
			if tc.notify {
				if err := raw.Do(testCtx(t), raw.B().ConfigSet().ParameterValue().ParameterValue("notify-keyspace-events", "KEA").Build()).Error(); err != nil {
					t.Fatal(err)
				}
			}
			c := newLockClient(t, []string{srv.Addr()})
			const name = "job"
			var opts []relock.LockOption
			if tc.fenced {
				opts = append(opts, relock.WithFencing())
			}
			l := c.Lock(name, opts...)
			if err := l.Lock(relock.WithOwner(testCtx(t), "w1")); err != nil {
				t.Fatal(err)
			}
			done := startBin("watch", name, "--redis", srv.Addr(), "--json", "--interval", "50ms", "--timeout", "500ms", "--for", "6s")
			waitSubscribed(t, raw, "redisson_lock__channel:{"+name+"}")
			if err := srv.Restart(); err != nil { // persistence off: the lock and its counter are gone
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil || r.code != 0 {
				t.Fatalf("watch: %v, exit %d\n%s", r.err, r.code, r.stderr)
			}
			var disappeared, alarms int
			for _, ev := range parseWatch(t, r.stdout) {
				switch ev.Event {
				case watchEvReleased, watchEvExpired:
					t.Errorf("watch reported %s: %q", ev.Event, ev.Text)
				case watchEvDisappeared:
					disappeared++
					if !strings.Contains(ev.Text, tc.disappr) || len(ev.Owners) != 1 || !strings.HasSuffix(ev.Owners[0], ":w1") {
						t.Errorf("the disappearance: %+v, want %q about w1", ev, tc.disappr)
					}
				case watchEvFencingBack:
					alarms++
					if !strings.HasPrefix(ev.Text, "ALARM: the fencing token went back from 1 to 0") {
						t.Errorf("the alarm: %q", ev.Text)
					}
				case watchEvFencing:
					t.Errorf("the counter going back reported as an ordinary change: %q", ev.Text)
				}
			}
			wantAlarms := 0
			if tc.fenced {
				wantAlarms = 1
			}
			if disappeared != 1 || alarms != wantAlarms {
				t.Fatalf("%d disappearances and %d alarms, want 1 and %d:\n%s", disappeared, alarms, wantAlarms, r.stdout)
			}
			if tc.fenced && !strings.Contains(r.stderr, "relock watch: ALARM: the fencing token went back") {
				t.Errorf("stderr does not carry the alarm:\n%s", r.stderr)
			}
		})
	}
}
