//go:build linux

package relockgocron_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	relockgocron "github.com/relock-go/relock/gocron"
	"github.com/relock-go/relock/internal/redistest"
)

// The replicas of the death tests are this test binary, run again with replicaEnv set to
// "<addr> <mode> <id> <job duration>": a process that schedules a job named "tick" every second, on a
// Client whose watchdog timeout is watchdogTimeout, with an Elector (mode "elector") or a Locker (mode
// "locker", MinHold half a second), and records each run's start in Redis (RPUSH runs "<id> <unix ms>").
// It runs until it is killed, and dies with the test (Pdeathsig).
const (
	replicaEnv      = "RELOCKGOCRON_REPLICA"
	watchdogTimeout = time.Second
)

func replicaMain() bool {
	spec := os.Getenv(replicaEnv)
	if spec == "" {
		return false
	}
	var addr, mode, id, d string
	_, err := fmt.Sscan(spec, &addr, &mode, &id, &d)
	job, derr := time.ParseDuration(d)
	if err != nil || derr != nil {
		fmt.Fprintln(os.Stderr, "replica:", spec, err, derr)
		os.Exit(2)
	}
	if err := replica(addr, mode, id, job); err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		os.Exit(1)
	}
	return true
}

func replica(addr, mode, id string, job time.Duration) error {
	c, err := relock.New([]string{addr}, &relock.Options{WatchdogTimeout: watchdogTimeout})
	if err != nil {
		return err
	}
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return err
	}
	var opt gocron.SchedulerOption
	switch mode {
	case "elector":
		e, err := relockgocron.NewElector(c, "replicas", id)
		if err != nil {
			return err
		}
		opt = gocron.WithDistributedElector(e)
	case "locker":
		l, err := relockgocron.NewLocker(c, &relockgocron.LockerOptions{MinHold: 500 * time.Millisecond})
		if err != nil {
			return err
		}
		opt = gocron.WithDistributedLocker(l)
	default:
		return fmt.Errorf("mode %q", mode)
	}
	s, err := gocron.NewScheduler(opt)
	if err != nil {
		return err
	}
	run := func() {
		rdb.Do(context.Background(), rdb.B().Rpush().Key("runs").Element(fmt.Sprintf("%s %d", id, time.Now().UnixMilli())).Build())
		time.Sleep(job)
	}
	if _, err := s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(run), gocron.WithName("tick")); err != nil {
		return err
	}
	s.Start()
	select {} // until killed
}

type run struct {
	replica string
	at      time.Time
}

func readRuns(t *testing.T, rdb rueidis.Client) []run {
	t.Helper()
	items, err := rdb.Do(context.Background(), rdb.B().Lrange().Key("runs").Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	var rs []run
	for _, it := range items {
		id, ms, _ := strings.Cut(it, " ")
		n, err := strconv.ParseInt(ms, 10, 64)
		if err != nil {
			t.Fatalf("run %q: %v", it, err)
		}
		rs = append(rs, run{id, time.UnixMilli(n)})
	}
	return rs
}

// startReplicas starts n replica processes; they are killed when the test ends.
func startReplicas(t *testing.T, addr, mode string, n int, job time.Duration) map[string]*exec.Cmd {
	t.Helper()
	procs := make(map[string]*exec.Cmd)
	for i := range n {
		id := fmt.Sprint("r", i)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %s %s", replicaEnv, addr, mode, id, job))
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[id] = cmd
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	return procs
}

// waitRun waits up to d for a run that matches ok, and returns it.
func waitRun(t *testing.T, rdb rueidis.Client, d time.Duration, what string, ok func(run) bool) run {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		for _, r := range readRuns(t, rdb) {
			if ok(r) {
				return r
			}
		}
	}
	t.Fatalf("no %s within %v: runs %v", what, d, readRuns(t, rdb))
	return run{}
}

// handover starts three replica processes of mode on a new server, waits for the first run, lets settle
// pass, SIGKILLs the replica that ran it, and returns that run, the first run by another replica, when the
// kill was made, and a client of the server. The first run by another replica must come within the
// watchdog timeout (the dead replica's hold expires), a tick (the next replica's scheduler runs at its
// next tick) and a second for the record to reach Redis on a loaded machine.
func handover(t *testing.T, mode string, job, settle time.Duration) (first, next run, killed time.Time, rdb rueidis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rdb.Close)
	procs := startReplicas(t, srv.Addr(), mode, 3, job)
	first = waitRun(t, rdb, 15*time.Second, "run", func(run) bool { return true })
	time.Sleep(settle)
	if mode == "locker" {
		if rs := readRuns(t, rdb); len(rs) != 1 {
			t.Fatalf("runs began while the first one ran: %v", rs)
		}
	}
	killed = time.Now()
	if err := procs[first.replica].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	next = waitRun(t, rdb, 10*time.Second, "run by another replica", func(r run) bool { return r.replica != first.replica })
	took := next.at.Sub(killed)
	t.Logf("the first run by another replica came %v after %s was killed", took, first.replica)
	if took > watchdogTimeout+2*time.Second {
		t.Fatalf("the first run by another replica came %v after %s was killed, want within the watchdog timeout (%v) and a tick", took, first.replica, watchdogTimeout)
	}
	time.Sleep(2500 * time.Millisecond)
	return first, next, killed, rdb
}

// Three replica processes with an Elector: only the leader runs the job, once per tick. SIGKILLed, the
// leader hands over within the watchdog timeout: another replica runs the first tick after that.
func TestElectorReplicaDeathHandsOver(t *testing.T) {
	first, next, killed, rdb := handover(t, "elector", time.Millisecond, 2500*time.Millisecond) // two more ticks, by the same leader
	perTick := make(map[int64][]string)
	for _, r := range readRuns(t, rdb) {
		if r.replica == first.replica && r.at.After(killed) {
			t.Fatalf("the killed leader ran the job at %v, after it was killed at %v", r.at, killed)
		}
		if r.replica != first.replica && r.at.Before(next.at) {
			t.Fatalf("replica %s ran the job at %v while %s led", r.replica, r.at, first.replica)
		}
		s := r.at.Unix()
		perTick[s] = append(perTick[s], r.replica)
	}
	for s, by := range perTick {
		if len(by) > 1 {
			t.Fatalf("tick %d ran %d times: %v", s, len(by), by)
		}
	}
	if len(perTick) < 6 {
		t.Fatalf("%d ticks ran, want 6 or more: %v", len(perTick), perTick)
	}
}

// Three replica processes with a Locker, the job lasting longer than the test: no run begins while the
// first one runs; the replica that runs it is SIGKILLed, and its lock expires within the watchdog timeout,
// so that another replica runs the first tick after that, and no other run begins while that one runs.
func TestLockerReplicaDeathHandsOver(t *testing.T) {
	_, _, _, rdb := handover(t, "locker", time.Hour, 2500*time.Millisecond) // ticks skipped: the run goes on
	if rs := readRuns(t, rdb); len(rs) != 2 {
		t.Fatalf("runs %v: want the killed replica's and one more, still running", rs)
	}
}
