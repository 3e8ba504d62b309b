package main

import (
	"encoding/hex"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// inspect and list on semaphores and latches: the built binary against semaphores the test holds through
// the library, on one server and on a cluster.

func TestInspectSemaphores(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	semaphoresOn(t, []string{srv.Addr()}, "svc:")
}

func TestInspectSemaphoresOnCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	semaphoresOn(t, cl.Addrs(), "svc:")
}

func inspectSemaphoreJSON(t *testing.T, addr, name string) semaphoreJSON {
	t.Helper()
	out, _ := mustRun(t, 0, "", "inspect", name, "--redis", addr, "--json")
	var j semaphoreJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("inspect --json printed %q: %v", out, err)
	}
	if !strings.Contains(out, `"permits": [`) {
		t.Fatalf("inspect --json: no permits list: %s", out)
	}
	return j
}

// listJSON runs list --json with args and returns "name/kind" of each entry, in order.
func listJSON(t *testing.T, addr string, args ...string) []string {
	t.Helper()
	out, _ := mustRun(t, 0, "", append([]string{"list", "--redis", addr, "--json"}, args...)...)
	var entries []struct{ Name, Kind string }
	if err := json.Unmarshal([]byte(out), &entries); err != nil {
		t.Fatalf("list --json printed %q: %v", out, err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name+"/"+e.Kind)
	}
	return got
}

func semaphoresOn(t *testing.T, addrs []string, prefix string) {
	addr := strings.Join(addrs, ",")
	c, err := relock.New(addrs, &relock.Options{WatchdogTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := testCtx(t)
	raw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// A semaphore of 5 with 2 permits taken, and a latch at 3.
	exports := c.Semaphore(prefix + "exports")
	_, err = exports.TrySetPermits(ctx, 5)
	must(err)
	must(exports.Acquire(ctx, 2))
	_, err = c.CountDownLatch(prefix+"batch").TrySetCount(ctx, 3)
	must(err)
	// A permit semaphore of 4: a permit kept by the watchdog, one with a lease, and a Redisson client's
	// whose lease ran out.
	jobs := c.PermitSemaphore(prefix + "jobs")
	_, err = jobs.TrySetPermits(ctx, 4)
	must(err)
	watched, err := jobs.Acquire(ctx)
	must(err)
	leased, ok, err := jobs.TryAcquire(ctx, 0, time.Minute)
	must(err)
	if !ok {
		t.Fatal("TryAcquire(0, a minute) took no permit of a semaphore that has one")
	}
	dead := "dead-permit-id16"
	must(raw.Do(ctx, raw.B().Decrby().Key(prefix+"jobs").Decrement(1).Build()).Error())
	must(raw.Do(ctx, raw.B().Zadd().Key("{"+prefix+"jobs}:timeout").ScoreMember().ScoreMember(1000, dead).Build()).Error())
	// A permit semaphore whose name has a hash tag, and one with no permit taken.
	tagged := c.PermitSemaphore(prefix + "{t1}:jobs")
	_, err = tagged.TrySetPermits(ctx, 1)
	must(err)
	_, err = tagged.Acquire(ctx)
	must(err)
	_, err = c.PermitSemaphore(prefix+"idle").TrySetPermits(ctx, 2)
	must(err)
	// Permits whose count key is gone (deleted by hand).
	must(raw.Do(ctx, raw.B().Zadd().Key("{"+prefix+"orphan}:timeout").ScoreMember().
		ScoreMember(float64(time.Now().Add(time.Hour).UnixMilli()), "orphan-permit-16").Build()).Error())
	// A permit semaphore named "{amb}", whose permits key "{amb}:timeout" is also the one "amb" would have.
	amb := c.PermitSemaphore("{amb}")
	_, err = amb.TrySetPermits(ctx, 1)
	must(err)
	_, err = amb.Acquire(ctx)
	must(err)
	// Locks, with a fencing counter and read holds: integer strings that are no semaphores.
	must(c.Lock(prefix+"orders:1", relock.WithFencing()).Lock(relock.WithOwner(ctx, "job")))
	must(c.ReadWriteLock(prefix + "cfg").ReadLock().Lock(relock.WithOwner(ctx, "reader")))
	// Strings that are not counters.
	must(raw.Do(ctx, raw.B().Set().Key(prefix+"word").Value("hello").Build()).Error())

	t.Run("inspect counters", func(t *testing.T) {
		j := inspectSemaphoreJSON(t, addr, prefix+"exports")
		if j.Kind != "semaphore_or_latch" || !j.Exists || j.Value != 3 || j.PermitsTaken != 0 || len(j.Permits) != 0 {
			t.Fatalf("%+v", j)
		}
		if j := inspectSemaphoreJSON(t, addr, prefix+"batch"); j.Kind != "semaphore_or_latch" || j.Value != 3 {
			t.Fatalf("latch: %+v", j)
		}
		out, _ := mustRun(t, 0, "", "inspect", prefix+"exports", "--redis", addr)
		if want := `semaphore or count-down latch "` + prefix + `exports": value 3`; !strings.HasPrefix(out, want) ||
			!strings.Contains(out, "cannot tell them apart") {
			t.Fatalf("inspect output, want %q first:\n%s", want, out)
		}
	})

	t.Run("inspect permit semaphore", func(t *testing.T) {
		j := inspectSemaphoreJSON(t, addr, prefix+"jobs")
		if j.Kind != "permit_semaphore" || !j.Exists || j.Value != 1 || j.PermitsTaken != 3 || j.PermitsExpired != 1 || len(j.Permits) != 3 {
			t.Fatalf("%+v", j)
		}
		if p := j.Permits[0]; p.ID != hex.EncodeToString([]byte(dead)) || p.ExpiresMillis > 0 {
			t.Fatalf("the expired permit first: %+v", p)
		}
		if p := j.Permits[1]; p.ID != watched.ID() || p.ExpiresMillis <= 0 || p.ExpiresMillis > 5000 {
			t.Fatalf("the watched permit %s, alive for at most the 5 s watchdog timeout: %+v", watched.ID(), p)
		}
		if p := j.Permits[2]; p.ID != leased.ID() || p.ExpiresMillis <= 50_000 || p.ExpiresMillis > 60_000 {
			t.Fatalf("the leased permit %s: %+v", leased.ID(), p)
		}
		out, _ := mustRun(t, 0, "", "inspect", prefix+"jobs", "--redis", addr)
		for _, want := range []string{
			`permit semaphore "` + prefix + `jobs": 1 available, 3 taken (1 expired: given back at the next acquisition)`,
			"permits taken (3), soonest to expire first:",
			"1. " + hex.EncodeToString([]byte(dead)) + ", expired ",
			"2. " + watched.ID() + ", expires in ",
			"3. " + leased.ID() + ", expires in ",
			"who took the permits is not in Redis",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("inspect output lacks %q:\n%s", want, out)
			}
		}
		if j := inspectSemaphoreJSON(t, addr, prefix+"{t1}:jobs"); j.Kind != "permit_semaphore" || j.Value != 0 || j.PermitsTaken != 1 {
			t.Fatalf("tagged: %+v", j)
		}
		// A permit semaphore with no permit taken is a counter.
		if j := inspectSemaphoreJSON(t, addr, prefix+"idle"); j.Kind != "semaphore_or_latch" || j.Value != 2 {
			t.Fatalf("idle: %+v", j)
		}
		// Permits without a count key: the lock is free, but the permits are shown.
		if j := inspectSemaphoreJSON(t, addr, prefix+"orphan"); j.Kind != "permit_semaphore" || j.Exists || j.PermitsTaken != 1 {
			t.Fatalf("orphan: %+v", j)
		}
		out, _ = mustRun(t, 0, "", "inspect", prefix+"orphan", "--redis", addr)
		if !strings.Contains(out, "0 available (its count key does not exist), 1 taken") {
			t.Fatalf("orphan:\n%s", out)
		}
	})

	t.Run("inspect locks unchanged", func(t *testing.T) {
		if j := inspectJSON(t, addr, prefix+"orders:1"); j.Kind != "rlock" || j.Holders[0].Token != "job" {
			t.Fatalf("%+v", j)
		}
		if j := inspectJSON(t, addr, prefix+"nothing"); j.Kind != "none" {
			t.Fatalf("%+v", j)
		}
		out, _ := mustRun(t, 0, "", "inspect", prefix+"nothing", "--redis", addr)
		if out != `lock "`+prefix+`nothing": free (no key in Redis)`+"\n" {
			t.Fatalf("free lock:\n%s", out)
		}
		_, errOut := mustRun(t, 1, "", "inspect", prefix+"word", "--redis", addr)
		if want := `is not a lock: the key is a string; nor a semaphore or latch: the key holds "hello", not an integer`; !strings.Contains(errOut, want) {
			t.Fatalf("stderr %q, want %q", errOut, want)
		}
		// unlock still refuses a semaphore.
		if _, errOut := mustRun(t, 1, "", "unlock", "--force", "--yes", prefix+"exports", "--redis", addr); !strings.Contains(errOut, "is not a lock") {
			t.Fatalf("unlock of a semaphore: %q", errOut)
		}
	})

	t.Run("list", func(t *testing.T) {
		got := strings.Join(listJSON(t, addr, prefix+"*"), " ")
		want := "svc:cfg/rwlock svc:orders:1/rlock svc:jobs/permit_semaphore svc:orphan/permit_semaphore svc:{t1}:jobs/permit_semaphore"
		if got != want {
			t.Fatalf("list found %q, want %q", got, want)
		}
		out, _ := mustRun(t, 0, "", "list", prefix+"*", "--redis", addr)
		if !regexp.MustCompile(`(?m)^NAME +KIND +AVAILABLE +TAKEN +EXPIRED$`).MatchString(out) ||
			!regexp.MustCompile(`(?m)^svc:jobs +permit semaphore +1 +3 +1$`).MatchString(out) ||
			!strings.Contains(out, prefix+"orders:1") || strings.Contains(out, prefix+"exports") {
			t.Fatalf("list output:\n%s", out)
		}
		// The pattern applies to the semaphore's name.
		if got := strings.Join(listJSON(t, addr, prefix+"jo*"), " "); got != "svc:jobs/permit_semaphore" {
			t.Fatalf("list svc:jo* found %q", got)
		}
		if got := strings.Join(listJSON(t, addr, prefix+"{t1}*"), " "); got != "svc:{t1}:jobs/permit_semaphore" {
			t.Fatalf("list svc:{t1}* found %q", got)
		}
		// "{amb}:timeout" is listed once, under the name whose count key exists.
		if got := strings.Join(listJSON(t, addr, "*amb*"), " "); got != "{amb}/permit_semaphore" {
			t.Fatalf("list *amb* found %q", got)
		}
		// Semaphores only: no lock table.
		out, _ = mustRun(t, 0, "", "list", prefix+"jo*", "--redis", addr)
		if strings.Contains(out, "no locks held") || !strings.HasPrefix(out, "NAME ") {
			t.Fatalf("list of a semaphore only:\n%s", out)
		}
		out, _ = mustRun(t, 0, "", "list", prefix+"nothing-*", "--redis", addr)
		if out != "no locks held\n" {
			t.Fatalf("empty list:\n%s", out)
		}
	})

	t.Run("list counters", func(t *testing.T) {
		got := strings.Join(listJSON(t, addr, prefix+"*", "--counters"), " ")
		want := "svc:cfg/rwlock svc:orders:1/rlock svc:batch/semaphore_or_latch svc:exports/semaphore_or_latch svc:idle/semaphore_or_latch " +
			"svc:jobs/permit_semaphore svc:orphan/permit_semaphore svc:{t1}:jobs/permit_semaphore"
		if got != want {
			t.Fatalf("list --counters found %q, want %q", got, want)
		}
		// Every key: locks' fencing counters and read holds are integer strings, but no semaphores.
		for _, entry := range listJSON(t, addr, "*", "--counters") {
			if strings.Contains(entry, "redisson_lock_token") || strings.Contains(entry, "rwlock_timeout") || strings.Contains(entry, "word") {
				t.Errorf("list * --counters lists %s", entry)
			}
		}
		out, _ := mustRun(t, 0, "", "list", prefix+"*", "--counters", "--redis", addr)
		if !regexp.MustCompile(`(?m)^svc:exports +semaphore or latch +3 +- +-$`).MatchString(out) || !strings.Contains(out, "(a latch's AVAILABLE is its count)") {
			t.Fatalf("list --counters output:\n%s", out)
		}
	})
}

// A permit Redisson took without a lease never expires: inspect says so, in JSON (no_expiry) and for people.
func TestInspectPermitWithoutLease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	raw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ctx := t.Context()
	for _, cmd := range []rueidis.Completed{
		raw.B().Set().Key("forever").Value("0").Build(),
		raw.B().Zadd().Key("{forever}:timeout").ScoreMember().ScoreMember(922337203685477, "no-lease-id-16by").Build(),
	} {
		if err := raw.Do(ctx, cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
	j := inspectSemaphoreJSON(t, srv.Addr(), "forever")
	if j.Kind != "permit_semaphore" || j.PermitsTaken != 1 || j.PermitsExpired != 0 || len(j.Permits) != 1 {
		t.Fatalf("%+v", j)
	}
	if p := j.Permits[0]; !p.NoExpiry || p.ExpiresMillis != -1 {
		t.Fatalf("the permit without a lease: %+v, want no_expiry", p)
	}
	out, _ := mustRun(t, 0, "", "inspect", "forever", "--redis", srv.Addr())
	if want := "1. " + hex.EncodeToString([]byte("no-lease-id-16by")) + ", never expires"; !strings.Contains(out, want) {
		t.Fatalf("inspect output lacks %q:\n%s", want, out)
	}
}
