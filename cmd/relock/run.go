package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
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

// runSynopsis is relock run's command line, for its usage.
const runSynopsis = "run [--election [--value V]] [--wait D] [--grace D] [flags] NAME -- CMD [ARGS...]"

// runAbout is what relock run -h says of CMD's processes, between the synopsis and the flags; %v is
// killWait.
const runAbout = `CMD runs in a process group of its own while the lock (leadership) is held. When the hold is lost, or
relock gets SIGINT, SIGTERM or SIGHUP, the group is sent SIGTERM, then SIGKILL --grace later if any
process of it is left; relock waits until the group is gone (%v at most after SIGKILL). When CMD exits,
what it left in its group is ended the same way before the lock is released: a process that must
outlive the lock must leave the group (setsid). If relock is killed, a guard process sends the group
SIGKILL (on Linux CMD also has SIGKILL as its parent-death signal). In the foreground of a terminal,
CMD shares relock's process group instead, and is signalled alone. See docs/command.md.
`

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
	fs := newFlags("run", runSynopsis, e)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: relock %s\n\n"+runAbout+"\nFlags:\n", runSynopsis, killWait)
		fs.PrintDefaults()
	}
	c.register(fs, 5*time.Second)
	election := fs.Bool("election", false, "win the election NAME (Election.Campaign) instead of taking the lock NAME; RELOCK_FENCING_TOKEN is then the leader's term")
	value := fs.String("value", "", "with --election, the `value` to campaign with, which inspect shows as the leader's (default HOST:PID)")
	var wait optionalDuration
	fs.Var(&wait, "wait", "give up, with exit status 4 and without running CMD, when the lock is not acquired (the election not won) within this `duration`; 0: one attempt, without --election (default: wait as long as it takes)")
	grace := defaultGrace
	fs.Var(nonNegativeDuration{&grace}, "grace", "when CMD's process group must end, wait this `duration` after SIGTERM before SIGKILL")
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
	lc, err := relock.NewContext(ctx, nil, &relock.Options{Redis: o, WatchdogTimeout: watchdog, ShardedPubSub: mode,
		Logger: slog.New(renewalWarnings{slog.Default().Handler()})})
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
// (it is lost) or ctx does (relock got SIGINT, SIGTERM or SIGHUP), cmd's process group is ended (see
// end); when cmd exits by itself and leaves processes in its group, they are ended so too. Once the
// group is gone the hold is released, within --timeout, unless it was lost. A hold lost makes the status
// exitHoldLost, whatever cmd's; otherwise it is cmd's own: its exit status, or 128 + the signal that
// ended it.
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
	p := &procs{cmd: cmd, group: !inForeground(e.stdin)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: p.group}
	setParentDeathSignal(cmd.SysProcAttr)
	if p.group {
		var err error
		if p.guard, err = startGuard(); err != nil && !e.json {
			fmt.Fprintf(e.stderr, "relock run: warning: cannot start the guard that ends the command's process group "+
				"if relock run dies (/bin/sh: %v): running the command without it\n", err)
		}
	}
	if err := p.start(); err != nil {
		p.guard.stop(true)
		serr := startError(cmd.Args[0], err)
		if rerr := release(c, h); rerr != nil {
			serr.err = fmt.Errorf("%w; releasing %s failed (it expires within the watchdog timeout): %v", serr.err, h.what, rerr)
		}
		return serr
	}
	prog := fmt.Sprintf("%q (pid %d)", cmd.Args[0], cmd.Process.Pid)
	var why string // why cmd was ended, if it was
	select {
	case <-p.exited:
	case <-h.ctx.Done():
		why = "ended"
	case <-ctx.Done():
		why = "interrupted"
	}
	var how string // how cmd ended: "exited with status N", or how run ended it
	var status int
	if why != "" {
		how, status = p.stop(grace)
	} else {
		status = exitStatus(cmd.ProcessState)
		how = fmt.Sprintf("exited with status %d", status)
		if !p.gone() { // it left processes in its group: they must not go on without the lock
			how += ", leaving processes in its process group: " + p.endLeft(grace)
			if !e.json {
				fmt.Fprintf(e.stderr, "relock run: %s %s\n", prog, how)
			}
		}
	}
	p.guard.stop(p.gone())

	if h.ctx.Err() != nil { // lost, before or after cmd exited
		return holdLost(h, context.Cause(h.ctx), prog, why != "", how)
	}
	rerr := release(c, h)
	if errors.Is(rerr, relock.ErrNotHeld) { // lost, and the Client had not noticed yet
		return holdLost(h, rerr, prog, why != "", how)
	}
	if rerr != nil {
		rerr = fmt.Errorf("%s %s, but releasing %s failed (it expires within the watchdog timeout): %w",
			prog, how, h.what, rerr)
		return &exitError{code: max(status, 1), err: rerr}
	}
	if why == "interrupted" {
		return &exitError{code: status, err: withKind(errKindInterrupted,
			fmt.Errorf("interrupted: %s %s; %s was released", prog, how, h.what))}
	}
	if status != 0 {
		return &exitError{code: status}
	}
	return nil
}

// holdLost is run's error when h was lost, for cause, while its command, prog, ran: ended says whether
// run ended it (else it had exited by itself), how says how it ended.
func holdLost(h *runHold, cause error, prog string, ended bool, how string) error {
	var err error
	if !ended {
		err = fmt.Errorf("lost %s while %s ran (%v): it %s, possibly after another holder had it", h.what, prog, cause, how)
	} else {
		err = fmt.Errorf("lost %s while %s ran (%v): it %s", h.what, prog, cause, how)
	}
	return &exitError{code: exitHoldLost, err: withKind(errKindHoldLost, err)}
}

// release releases h, within --timeout.
func release(c *common, h *runHold) error {
	ctx, cancel := c.withTimeout(context.Background())
	defer cancel()
	return h.release(ctx)
}

// killWait bounds how long run waits, after SIGKILL, for its command's process group to be gone. SIGKILL
// cannot be caught, so this is the time the kernel takes, unless a process is stuck in the kernel (an
// uninterruptible sleep: a hung NFS mount) or has exited and no one reaps it (a zombie, whose parent is
// alive outside the group, or is an init that does not reap).
const killWait = 5 * time.Second

// groupPoll is how often run looks whether its command's process group is gone, once the command (the
// group's leader) has exited: nothing tells when the last of its other processes exits.
const groupPoll = 10 * time.Millisecond

// procs is run's command and, when it has a process group of its own, the processes of that group.
type procs struct {
	cmd    *exec.Cmd
	group  bool          // cmd leads a process group of its own (see inForeground)
	guard  *guard        // ends the group if run dies first; nil without a group, or if it could not start
	exited chan struct{} // closed once cmd has exited and been waited for
}

// start starts cmd, and a goroutine that waits for it and then closes p.exited.
//
// The goroutine starts cmd and waits for it on one OS thread, locked: a parent-death signal
// (setParentDeathSignal) is sent when the thread that started the child exits, not the process, and Go
// ends a thread when a goroutine locked to it returns. Locked, the thread runs nothing else until cmd
// has exited, so no other goroutine can lock it and end it meanwhile.
func (p *procs) start() error {
	p.exited = make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(p.exited)
		if err := p.cmd.Start(); err != nil {
			started <- err
			return
		}
		p.guard.watch(p.cmd.Process.Pid)
		started <- nil
		_ = p.cmd.Wait() // the status is read from cmd.ProcessState
	}()
	return <-started
}

// leaderExited reports whether cmd has exited (and been waited for).
func (p *procs) leaderExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// gone reports whether cmd has exited and, when it leads a process group, no process of the group is
// left (kill(-pgid, 0) fails with ESRCH; a zombie still counts).
func (p *procs) gone() bool {
	if !p.leaderExited() {
		return false
	}
	if !p.group {
		return true
	}
	pgid := p.cmd.Process.Pid
	// Reap the group's processes that are run's children: orphans, which come to run on Linux (see
	// reapOrphans) or when it is a container's init (pid 1). A zombie would keep the group there. Only
	// once cmd was waited for: this must not take cmd's own exit status from its Wait.
	for {
		pid, err := syscall.Wait4(-pgid, nil, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			break
		}
	}
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

// signal sends sig to cmd's process group when it has one, else to cmd.
func (p *procs) signal(sig syscall.Signal) {
	if p.group {
		_ = syscall.Kill(-p.cmd.Process.Pid, sig)
		return
	}
	if !p.leaderExited() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// waitGone waits until p is gone, for d at most, and reports whether it is. Once cmd has exited, again,
// when not 0, is sent to the group at each look that finds it there (so that its id cannot be another
// group's yet).
func (p *procs) waitGone(d time.Duration, again syscall.Signal) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		if p.gone() {
			return true
		}
		exited, tick := (<-chan struct{})(p.exited), (<-chan time.Time)(nil)
		if p.leaderExited() {
			if again != 0 {
				p.signal(again)
			}
			exited, tick = nil, time.After(groupPoll)
		}
		select {
		case <-exited:
		case <-tick:
		case <-deadline.C:
			return p.gone()
		}
	}
}

// ending is what end did.
type ending struct {
	killed       bool // some process of the group was still there --grace after SIGTERM: SIGKILL was sent
	leaderKilled bool // cmd itself was: it did not exit at SIGTERM
	lingered     bool // the group was still there killWait after SIGKILL
}

// end ends cmd and its process group: SIGTERM, then SIGKILL when some process of it is left grace later
// (cmd or another; again and again, until the group is gone, killWait at most). It returns once the
// group is gone, or killWait after SIGKILL.
func (p *procs) end(grace time.Duration) ending {
	var en ending
	p.signal(syscall.SIGTERM)
	if p.waitGone(grace, 0) {
		return en
	}
	en.killed, en.leaderKilled = true, !p.leaderExited()
	p.signal(syscall.SIGKILL)
	en.lingered = !p.waitGone(killWait, syscall.SIGKILL)
	return en
}

// stop ends cmd, running, and its process group (see end), and returns how it ended, for messages ("was
// sent SIGTERM, and exited with status 143"), and the status run takes as cmd's.
func (p *procs) stop(grace time.Duration) (how string, status int) {
	en := p.end(grace)
	switch {
	case en.leaderKilled:
		how = "was sent SIGTERM, did not exit within --grace " + grace.String() + ", was sent SIGKILL"
	case en.killed:
		how = "was sent SIGTERM (processes of its group still there --grace " + grace.String() + " later were sent SIGKILL)"
	default:
		how = "was sent SIGTERM"
	}
	if p.leaderExited() {
		status = exitStatus(p.cmd.ProcessState)
		how += fmt.Sprintf(", and exited with status %d", status)
	} else { // stuck in the kernel
		status = 128 + int(syscall.SIGKILL)
		how += fmt.Sprintf(", and had not exited %v later", killWait)
	}
	return how + p.lingered(en), status
}

// endLeft ends what cmd, which exited, left in its process group (see end), and returns what run did,
// for messages.
func (p *procs) endLeft(grace time.Duration) string {
	en := p.end(grace)
	how := "they were sent SIGTERM"
	if en.killed {
		how += ", were still there --grace " + grace.String() + " later, and were sent SIGKILL"
	}
	return how + p.lingered(en)
}

// lingered is what messages add when the group outlived killWait.
func (p *procs) lingered(en ending) string {
	if !en.lingered {
		return ""
	}
	return fmt.Sprintf("; its process group %d was still there %v after SIGKILL", p.cmd.Process.Pid, killWait)
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

// renewalWarnings passes relock's Warn records (a renewal failed: the hold is at risk) to stderr, through
// the default logger, and drops its Error records (a hold lost): run says that itself, with what it did to
// the command.
type renewalWarnings struct{ slog.Handler }

func (h renewalWarnings) Enabled(ctx context.Context, l slog.Level) bool {
	return l < slog.LevelError && h.Handler.Enabled(ctx, l)
}

func (h renewalWarnings) WithAttrs(attrs []slog.Attr) slog.Handler {
	return renewalWarnings{h.Handler.WithAttrs(attrs)}
}

func (h renewalWarnings) WithGroup(name string) slog.Handler {
	return renewalWarnings{h.Handler.WithGroup(name)}
}
