// Command relock shows what a distributed lock is for, and lets an operator see and fix the locks of a
// running system.
//
//	relock demo [flags]              workers racing on a shared counter, with and without a lock
//	relock inspect NAME              who holds a lock, for how long, who waits, the fencing token;
//	                                 an election's leader, term and last leaders;
//	                                 or a semaphore's or latch's count and permits taken
//	relock list [PATTERN]            the locks present (found with SCAN), with holders and TTL (an
//	                                 election's leader and term), and the permit semaphores with permits
//	                                 taken
//	relock watch NAME                a lock's state changes, live
//	relock unlock --force NAME       release a stuck lock and wake its waiters
//	relock run NAME -- CMD [ARGS...] run CMD while holding the fenced lock NAME (with --election: while
//	                                 leading the election NAME), its fencing token (the leader's term)
//	                                 in RELOCK_FENCING_TOKEN; SIGTERM, then SIGKILL after --grace, end its
//	                                 process group when the hold is lost (or on SIGINT, SIGTERM, SIGHUP),
//	                                 and what it leaves in its group when it exits
//
// Every command takes --redis ADDR (host:port, a comma-separated list of cluster seed nodes, or a
// redis:// URL; default $RELOCK_REDIS, else 127.0.0.1:6379), --timeout D (above zero) and --json. demo
// without --redis starts its own Redis. Exit status: 0 on success, 1 on an error, 2 on a usage error.
// run exits with its command's status (128 + the signal's number when a signal ended it), or 3 when the
// hold was lost while the command ran (it was ended), 4 when --wait ran out (the command was not run),
// 126 when the command could not be run and 127 when it was not found.
//
// With --json, results are JSON on stdout, and an error is one line of JSON on stderr (see errorJSON):
// {"error": "...", "kind": "...", "command": "..."}, where kind is usage (exit status 2), unavailable
// (Redis could not be reached or did not answer in time), wrong_kind (the name holds another kind of key),
// interrupted, hold_lost (run, status 3), not_acquired (run, status 4), or error (anything else).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// errUsage marks an error in the command line: it is printed with the usage, and exits with status 2.
var errUsage = errors.New("usage")

// env is what a command runs with: its arguments and standard streams, so tests can run commands in
// process as well as through the built binary.
type env struct {
	args   []string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	json   bool // --json is on the command line (see jsonRequested): errors are printed as JSON
}

type command struct {
	name, synopsis string
	run            func(ctx context.Context, e env) error
}

var commands []command

func init() {
	commands = []command{
		{"demo", "workers racing on a shared counter, with and without a lock", runDemo},
		{"inspect", "show a lock's state: kind, holders, TTL, queue, fencing token (an election's leader and term; or a semaphore's)", runInspect},
		{"list", "list the locks, elections and semaphores whose names match a pattern (SCAN, never KEYS)", runList},
		{"watch", "print a lock's state changes as they happen", runWatch},
		{"unlock", "release a stuck lock (--force) and wake its waiters", runUnlock},
		{"run", "run a command while holding a lock (or leading an election); end it if the hold is lost", runRun},
		{"prune", "delete the records of elections nobody leads or campaigns in any more (their fencing counters are kept)", runPrune},
	}
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "run" {
		reapOrphans()
	}
	ctx, stop := signal.NotifyContext(context.Background(), interruptSignals()...)
	code := run(ctx, env{args: os.Args[1:], stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr})
	stop()
	os.Exit(code)
}

// interruptSignals are the signals that interrupt a command (run then ends its command and releases its
// hold): SIGINT, SIGTERM and SIGHUP, but for a SIGHUP ignored as relock started (nohup), which stays
// ignored, as it would without a handler (see os/signal). SIGINT is handled even when it was ignored (a
// script's background job): the demo stops its worker processes, which are relock too, with SIGINT.
func interruptSignals() []os.Signal {
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}

// run runs the command line e.args and returns the exit status.
func run(ctx context.Context, e env) int {
	if len(e.args) == 0 || e.args[0] == "-h" || e.args[0] == "--help" || e.args[0] == "help" {
		usage(e.stderr)
		if len(e.args) == 0 {
			return 2
		}
		return 0
	}
	e.json = jsonRequested(e.args)
	for _, c := range commands {
		if c.name != e.args[0] {
			continue
		}
		sub := e
		sub.args = e.args[1:]
		err := c.run(ctx, sub)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		}
		if x, ok := err.(*exitError); ok {
			if x.err != nil {
				printError(e.stderr, c.name, x.err, e.json)
			}
			return x.code
		}
		if ctx.Err() != nil && errorKind(err) == errKindOther {
			err = withKind(errKindInterrupted, err)
		}
		printError(e.stderr, c.name, err, e.json)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	printError(e.stderr, "", fmt.Errorf("%w: unknown command %q", errUsage, e.args[0]), e.json)
	if !e.json {
		usage(e.stderr)
	}
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "relock: distributed locks on Redis, for people and for scripts.")
	fmt.Fprintln(w, "\nUsage: relock COMMAND [flags] [args]")
	fmt.Fprintln(w, "\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.synopsis)
	}
	fmt.Fprintln(w, "\nCommon flags: --redis ADDR (default $RELOCK_REDIS or 127.0.0.1:6379), --timeout D (above zero), --json.")
	fmt.Fprintln(w, "With --json, results are JSON on stdout, and an error is one line of JSON on stderr:")
	fmt.Fprintln(w, `  {"error": "...", "kind": "...", "command": "..."}, kind being usage (exit status 2),`)
	fmt.Fprintln(w, "  unavailable, wrong_kind, interrupted or error (exit status 1).")
	fmt.Fprintln(w, "run exits with its command's status (128+N when signal N ended it), 3 when the hold was lost")
	fmt.Fprintln(w, "  (kind hold_lost: the command was ended), 4 when --wait ran out (kind not_acquired: it was not run).")
	fmt.Fprintln(w, "Run 'relock COMMAND -h' for a command's flags.")
}
