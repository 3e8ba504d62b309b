package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/relock-go/relock"
)

// relock run: a command run while a lock (or an election's leadership) is held, ended when it is lost.

// The exit statuses of relock run besides its command's own (and 1, an error, and 2, a usage error).
const (
	exitHoldLost    = 3   // the lock or leadership was lost while the command ran; the command was ended
	exitNotAcquired = 4   // --wait ran out before the lock (leadership) was had: the command was not run
	exitCannotRun   = 126 // the command was found but could not be started (as shells say it)
	exitNotFound    = 127 // the command was not found (as shells say it)
)

// defaultGrace is how long run waits, by default, for its command to exit after SIGTERM before SIGKILL.
const defaultGrace = 10 * time.Second

// runWaitDelay bounds how long run waits, once its command has exited, for the command's output to be
// copied, when its streams are not files (in tests): a process the command left behind may hold them.
const runWaitDelay = time.Second

// The environment variables run gives its command, besides its own environment.
const (
	envName         = "RELOCK_NAME"          // the lock's (election's) name
	envFencingToken = "RELOCK_FENCING_TOKEN" // the lock's fencing token, or the leader's term
)

// optionalDuration is the flag.Value of a duration that must not be negative and whose absence means
// something else than any value (--wait).
type optionalDuration struct {
	d   time.Duration
	set bool
}

func (o *optionalDuration) String() string {
	if o == nil || !o.set {
		return ""
	}
	return o.d.String()
}

func (o *optionalDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return errors.New("not a duration (such as 5s or 500ms)")
	case d < 0:
		return errors.New("must not be negative")
	}
	o.d, o.set = d, true
	return nil
}

// nonNegativeDuration is the flag.Value of a duration that must not be negative (--grace).
type nonNegativeDuration struct{ d *time.Duration }

func (n nonNegativeDuration) String() string {
	if n.d == nil {
		return "0s"
	}
	return n.d.String()
}

func (n nonNegativeDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return errors.New("not a duration (such as 5s or 500ms)")
	case d < 0:
		return errors.New("must not be negative")
	}
	*n.d = d
	return nil
}

// runHold is what run holds while its command runs: a lock, or an election's leadership.
type runHold struct {
	what    string          // `lock "NAME"` or `the leadership of election "NAME"`, for messages
	token   uint64          // the lock's fencing token, or the leader's term
	ctx     context.Context // ends when the hold ends (HoldContext, LeadershipContext)
	release func(context.Context) error
}

// runOwner is the owner token of run's holds: "relock-run:<host>:<pid>", which inspect shows.
func runOwner() string {
	return "relock-run:" + hostname() + ":" + strconv.Itoa(os.Getpid())
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown-host"
	}
	return h
}

// splitCommand splits run's arguments at the first "--": what comes before are run's flags and NAME,
// what comes after is the command. ok is false when there is no "--".
func splitCommand(args []string) (own, argv []string, ok bool) {
	for i, a := range args {
		if a == "--" {
			return args[:i], args[i+1:], true
		}
	}
	return args, nil, false
}

func runRun(ctx context.Context, e env) error {
	var c common
	fs := newFlags("run", "run [--election [--value V]] [--wait D] [--grace D] [flags] NAME -- CMD [ARGS...]", e)
	c.register(fs, 5*time.Second)
	election := fs.Bool("election", false, "win the election NAME (Election.Campaign) instead of taking the lock NAME; RELOCK_FENCING_TOKEN is then the leader's term")
	value := fs.String("value", "", "with --election, the `value` to campaign with, which inspect shows as the leader's (default HOST:PID)")
	var wait optionalDuration
	fs.Var(&wait, "wait", "give up, with exit status 4 and without running CMD, when the lock is not acquired (the election not won) within this `duration`; 0: one attempt, without --election (default: wait as long as it takes)")
	grace := defaultGrace
	fs.Var(nonNegativeDuration{&grace}, "grace", "when CMD must end, wait this `duration` after SIGTERM before SIGKILL")
	watchdog := relock.DefaultWatchdogTimeout
	fs.Var(positiveDuration{&watchdog}, "watchdog-timeout", "advanced: the hold lives this `duration` in Redis between renewals (at least 100ms): a relock run that dies frees the lock within it, and a loss is noticed within a third of it")
	own, argv, dashes := splitCommand(e.args)
	pos, err := parse(fs, own)
	if err != nil {
		return err
	}
	switch {
	case !dashes || len(argv) == 0:
		return fmt.Errorf("%w: want NAME -- CMD [ARGS...]: the command to run comes after \"--\"", errUsage)
	case len(pos) != 1:
		return fmt.Errorf("%w: want one lock name before \"--\", got %d arguments", errUsage, len(pos))
	case watchdog < relock.MinWatchdogTimeout:
		return fmt.Errorf("%w: --watchdog-timeout %v: must be at least %v", errUsage, watchdog, relock.MinWatchdogTimeout)
	case *value != "" && !*election:
		return fmt.Errorf("%w: --value is for --election", errUsage)
	case *election && wait.set && wait.d == 0:
		return fmt.Errorf("%w: --election needs a --wait above zero: a candidate waits in the election's queue", errUsage)
	}
	name := pos[0]
	if *value == "" {
		*value = hostname() + ":" + strconv.Itoa(os.Getpid())
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	if cmd.Err != nil {
		return startError(argv[0], cmd.Err)
	}

	lc, err := c.connectNamed(ctx, watchdog)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := c.withTimeout(context.Background())
		defer cancel()
		_ = lc.CloseContext(cctx) // gives up what is still held (run released it already, or lost it)
	}()
	owner := runOwner()
	var h *runHold
	if *election {
		h, err = campaign(ctx, &c, lc, name, owner, *value, wait)
	} else {
		h, err = acquire(ctx, &c, lc, name, owner, wait)
	}
	if err != nil {
		return err
	}
	return supervise(ctx, e, &c, cmd, name, h, grace)
}

// connectNamed connects as connect does, within --timeout, but with relock.New, which names the
// Client's connections relock-<ID>: inspect then shows where a holder that is a relock run is connected
// from (and that it is alive). The Client's watchdog timeout is watchdog. Close closes it all.
func (c *common) connectNamed(ctx context.Context, watchdog time.Duration) (*relock.Client, error) {
	o, err := c.clientOption()
	if err != nil {
		return nil, err
	}
	mode, err := c.shardedPubSub()
	if err != nil {
		return nil, err
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	lc, err := relock.NewContext(ctx, nil, &relock.Options{Redis: o, WatchdogTimeout: watchdog, ShardedPubSub: mode})
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil, withKind(errKindInterrupted, errors.New("interrupted"))
		}
		return nil, redisError(c.redis, err)
	}
	return lc, nil
}

// acquire takes the lock name, fenced, for owner: with Lock, or TryLock when wait is set.
func acquire(ctx context.Context, c *common, lc *relock.Client, name, owner string, wait optionalDuration) (*runHold, error) {
	l := lc.Lock(name, relock.WithFencing())
	wctx := relock.WithOwner(ctx, owner)
	var err error
	if wait.set {
		var ok bool
		ok, err = l.TryLock(wctx, wait.d, 0)
		if err == nil && !ok {
			return nil, notAcquired(c, lc, name, fmt.Sprintf("lock %q not acquired", name), wait.d)
		}
	} else {
		err = l.Lock(wctx)
	}
	if err != nil {
		return nil, acquireError(c, name, err)
	}
	octx := relock.WithOwner(context.Background(), owner)
	h := &runHold{what: fmt.Sprintf("lock %q", name), release: func(ctx context.Context) error {
		return l.Unlock(relock.WithOwner(ctx, owner))
	}}
	if h.ctx, err = l.HoldContext(octx); err == nil {
		h.token, err = l.FencingToken(octx)
	}
	if err != nil { // lost at once
		return nil, &exitError{code: exitHoldLost, err: withKind(errKindHoldLost,
			fmt.Errorf("lost lock %q as soon as it was acquired: %w; the command was not run", name, err))}
	}
	return h, nil
}

// campaign wins the election name for owner, with value: within wait when it is set.
func campaign(ctx context.Context, c *common, lc *relock.Client, name, owner, value string, wait optionalDuration) (*runHold, error) {
	el := lc.Election(name)
	wctx := relock.WithOwner(ctx, owner)
	if wait.set {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(wctx, wait.d)
		defer cancel()
	}
	what := fmt.Sprintf("the leadership of election %q", name)
	term, err := el.Campaign(wctx, value)
	if err != nil {
		if wait.set && wctx.Err() != nil && ctx.Err() == nil {
			return nil, notAcquired(c, lc, name, fmt.Sprintf("election %q not won", name), wait.d)
		}
		return nil, acquireError(c, name, err)
	}
	octx := relock.WithOwner(context.Background(), owner)
	h := &runHold{what: what, token: term, release: func(ctx context.Context) error {
		return el.Resign(relock.WithOwner(ctx, owner))
	}}
	if h.ctx, err = el.LeadershipContext(octx); err != nil {
		return nil, &exitError{code: exitHoldLost, err: withKind(errKindHoldLost,
			fmt.Errorf("lost %s as soon as it was won: %w; the command was not run", what, err))}
	}
	return h, nil
}

// notAcquired is the error of a --wait that ran out, what says what was not had: exit status 4, saying
// who holds the lock when one read of it (within --timeout) tells.
func notAcquired(c *common, lc *relock.Client, name, what string, wait time.Duration) error {
	by := ""
	ctx, cancel := c.withTimeout(context.Background())
	defer cancel()
	if st, err := lc.Inspect(ctx, name); err == nil && len(st.Holders) == 1 {
		by = " (held by " + ownerText(st.Holders[0].ClientID, st.Holders[0].Token) + ")"
	} else if err == nil && len(st.Holders) > 1 {
		by = fmt.Sprintf(" (held by %d owners)", len(st.Holders))
	}
	return &exitError{code: exitNotAcquired, err: withKind(errKindNotAcquired,
		fmt.Errorf("%s within --wait %v%s: the command was not run", what, wait, by))}
}

// acquireError turns an error of Lock, TryLock or Campaign into what an operator should read.
func acquireError(c *common, name string, err error) error {
	switch {
	case errors.Is(err, relock.ErrWrongKind):
		return withKind(errKindWrongKind, fmt.Errorf("%q is not a lock: %v", name, err))
	case errors.Is(err, relock.ErrInvalidName):
		return fmt.Errorf("%w: %q is not a valid lock name (empty, or a \"}\" outside a {hash tag})", errUsage, name)
	case errors.Is(err, context.Canceled):
		return withKind(errKindInterrupted, fmt.Errorf("interrupted while waiting for %q: the command was not run", name))
	}
	return redisError(c.redis, err)
}

// startError is the error of a command that could not be started: status 127 when it was not found,
// 126 when it could not be run, as shells have it.
func startError(name string, err error) *exitError {
	code := exitCannotRun
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		code = exitNotFound
	}
	return &exitError{code: code, err: fmt.Errorf("cannot run %q: %w", name, err)}
}

// supervise runs cmd while h is held, and returns how run ends: nil when cmd exited with status 0 and
// h was released, else an *exitError with the status run exits with.
//
// cmd gets run's streams and environment, plus RELOCK_NAME and RELOCK_FENCING_TOKEN. When the hold ends
// (it is lost) or ctx does (relock got SIGINT or SIGTERM), cmd is sent SIGTERM, and SIGKILL if it has
// not exited grace after. Once cmd has exited the hold is released, within --timeout, unless it was lost.
// A hold lost makes the status exitHoldLost, whatever cmd's; otherwise it is cmd's own: its exit status,
// or 128 + the signal that ended it.
func supervise(ctx context.Context, e env, c *common, cmd *exec.Cmd, name string, h *runHold, grace time.Duration) error {
	cmd.Env = append(os.Environ(), envName+"="+name, envFencingToken+"="+strconv.FormatUint(h.token, 10))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.stdin, e.stdout, e.stderr
	cmd.WaitDelay = runWaitDelay
	if ctx.Err() != nil { // interrupted just as the hold was had
		if rerr := release(c, h); rerr != nil {
			return fmt.Errorf("interrupted; releasing %s failed (it expires within the watchdog timeout): %w", h.what, rerr)
		}
		return withKind(errKindInterrupted, fmt.Errorf("interrupted: the command was not run; %s was released", h.what))
	}
	group := !inForeground(e.stdin)
	if group {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if err := cmd.Start(); err != nil {
		serr := startError(cmd.Args[0], err)
		if rerr := release(c, h); rerr != nil {
			serr.err = fmt.Errorf("%w; releasing %s failed (it expires within the watchdog timeout): %v", serr.err, h.what, rerr)
		}
		return serr
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // the status is read from cmd.ProcessState
		close(exited)
	}()
	prog := fmt.Sprintf("%q (pid %d)", cmd.Args[0], cmd.Process.Pid)
	var why string // why cmd was ended, if it was
	select {
	case <-exited:
	case <-h.ctx.Done():
		why = "ended"
	case <-ctx.Done():
		why = "interrupted"
	}
	ending := ""
	if why != "" {
		ending = stop(cmd, group, exited, grace)
	}
	status := exitStatus(cmd.ProcessState)

	if h.ctx.Err() != nil { // lost, before or after cmd exited
		return holdLost(h, context.Cause(h.ctx), prog, ending, status)
	}
	rerr := release(c, h)
	if errors.Is(rerr, relock.ErrNotHeld) { // lost, and the Client had not noticed yet
		return holdLost(h, rerr, prog, ending, status)
	}
	if rerr != nil {
		rerr = fmt.Errorf("%s exited with status %d, but releasing %s failed (it expires within the watchdog timeout): %w",
			prog, status, h.what, rerr)
		return &exitError{code: max(status, 1), err: rerr}
	}
	if why == "interrupted" {
		return &exitError{code: status, err: withKind(errKindInterrupted,
			fmt.Errorf("interrupted: %s %s, and exited with status %d; %s was released", prog, ending, status, h.what))}
	}
	if status != 0 {
		return &exitError{code: status}
	}
	return nil
}

// holdLost is run's error when h was lost, for cause, while its command, prog, ran: ending says how run
// ended it ("" when the command had exited by itself), status is the command's exit status.
func holdLost(h *runHold, cause error, prog, ending string, status int) error {
	var err error
	if ending == "" {
		err = fmt.Errorf("lost %s while %s ran (%v): it exited with status %d, possibly after another holder had it",
			h.what, prog, cause, status)
	} else {
		err = fmt.Errorf("lost %s while %s ran (%v): it %s, and exited with status %d", h.what, prog, cause, ending, status)
	}
	return &exitError{code: exitHoldLost, err: withKind(errKindHoldLost, err)}
}

// release releases h, within --timeout.
func release(c *common, h *runHold) error {
	ctx, cancel := c.withTimeout(context.Background())
	defer cancel()
	return h.release(ctx)
}

// stop ends cmd: SIGTERM, then SIGKILL when it has not exited grace later. exited is closed once cmd has
// exited and been waited for; stop returns then, saying what it did, for messages.
func stop(cmd *exec.Cmd, group bool, exited <-chan struct{}, grace time.Duration) string {
	signalCmd(cmd, group, syscall.SIGTERM)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-exited:
		return "was sent SIGTERM"
	case <-timer.C:
	}
	signalCmd(cmd, group, syscall.SIGKILL)
	<-exited
	return fmt.Sprintf("was sent SIGTERM, did not exit within --grace %v, was sent SIGKILL", grace)
}

// signalCmd sends sig to cmd's process group when group is set, else to cmd's process.
func signalCmd(cmd *exec.Cmd, group bool, sig syscall.Signal) {
	if group {
		_ = syscall.Kill(-cmd.Process.Pid, sig)
		return
	}
	_ = cmd.Process.Signal(sig)
}

// inForeground reports whether stdin is a terminal whose foreground process group is run's own: the
// command then stays in run's process group, so that it can read the terminal (and the terminal's
// signals reach it too); otherwise it gets a process group of its own, and run signals the whole group.
func inForeground(stdin io.Reader) bool {
	f, ok := stdin.(*os.File)
	if !ok {
		return false
	}
	pgrp, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP)
	return err == nil && pgrp == unix.Getpgrp()
}

// exitStatus is the status a shell gives a command that ended as ps says: its exit status, or 128 + the
// signal that ended it.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
