package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/relock-go/relock"
)

// The kinds of error, as --json reports them (see printError). Scripts may rely on them.
const (
	errKindUsage       = "usage"        // the command line is wrong (exit status 2)
	errKindUnavailable = "unavailable"  // Redis could not be reached, or did not answer in time
	errKindWrongKind   = "wrong_kind"   // the name holds another kind of key than the command works on
	errKindInterrupted = "interrupted"  // the command was interrupted (SIGINT, SIGTERM, SIGHUP)
	errKindHoldLost    = "hold_lost"    // run: the lock or leadership was lost while the command ran (exit status 3)
	errKindNotAcquired = "not_acquired" // run: --wait ran out, the command was not run (exit status 4)
	errKindOther       = "error"        // anything else: an error reply of Redis, an unlock not confirmed...
)

// kindError is an error of a known kind (one of errKind...), with err's text.
type kindError struct {
	kind string
	err  error
}

func (e *kindError) Error() string { return e.err.Error() }
func (e *kindError) Unwrap() error { return e.err }

// withKind returns err as an error of kind.
func withKind(kind string, err error) error { return &kindError{kind: kind, err: err} }

// exitError makes a command exit with status code rather than 1 (run passes on its command's status so).
// Its err, when not nil, is printed as any error is; a nil err prints nothing.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// errorKind returns the kind of err, a command's error.
func errorKind(err error) string {
	var k *kindError
	switch {
	case errors.Is(err, errUsage):
		return errKindUsage
	case errors.As(err, &k):
		return k.kind
	case errors.Is(err, relock.ErrUnavailable):
		return errKindUnavailable
	case errors.Is(err, relock.ErrWrongKind):
		return errKindWrongKind
	case errors.Is(err, context.Canceled):
		return errKindInterrupted
	}
	return errKindOther
}

// errorJSON is the error --json prints, on one line of stderr.
type errorJSON struct {
	Error   string `json:"error"`
	Kind    string `json:"kind"`
	Command string `json:"command,omitempty"` // "" for an unknown command
}

// printError prints err, the error of command (its name; "" for none), on w: with asJSON, as one line of
// JSON (errorJSON); otherwise as text, with a hint at the usage for a usage error.
func printError(w io.Writer, command string, err error, asJSON bool) {
	if asJSON {
		b, _ := json.Marshal(errorJSON{Error: err.Error(), Kind: errorKind(err), Command: command})
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	if command == "" {
		fmt.Fprintf(w, "relock: %v\n", err)
		return
	}
	fmt.Fprintf(w, "relock %s: %v\n", command, err)
	if errors.Is(err, errUsage) {
		fmt.Fprintf(w, "Run 'relock %s -h' for usage.\n", command)
	}
}
