package relocktest_test

import (
	"errors"
	"testing"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/relocktest"
)

// Guarded and fenced writes run in relocktest's in-process Redis as in a real one: they land while the
// hold is current, and a stale holder's are refused.
func TestGuardedWrites(t *testing.T) {
	t.Parallel()
	srv := relocktest.NewServer(t)
	a, b := srv.Client(nil), srv.Client(nil)
	ctx := ctxTimeout(t, 10*time.Second)
	l := a.Lock("{g}", relock.WithFencing())
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.GuardedWrite(ctx, a.B().Set().Key("{g}:v").Value("1").Build()); err != nil {
		t.Fatal(err)
	}
	if _, err := l.GuardedEval(ctx, "return redis.call('set', KEYS[1], ARGV[1])", []string{"{g}:w"}, []string{"1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.FencedWrite(ctx, "{r}:fence", a.B().Set().Key("{r}:v").Value("1").Build()); err != nil {
		t.Fatal(err)
	}
	if !srv.Expire("{g}") {
		t.Fatal("Expire found nothing held")
	}
	lb := b.Lock("{g}", relock.WithFencing())
	if err := lb.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := lb.FencedWrite(ctx, "{r}:fence", b.B().Set().Key("{r}:v").Value("2").Build()); err != nil {
		t.Fatal(err)
	}
	if _, err := l.GuardedWrite(ctx, a.B().Set().Key("{g}:v").Value("stale").Build()); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("a stale GuardedWrite = %v; want ErrNotHeld", err)
	}
	if _, err := l.FencedWrite(ctx, "{r}:fence", a.B().Set().Key("{r}:v").Value("stale").Build()); err != nil && !errors.Is(err, relock.ErrStaleToken) && !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("a stale FencedWrite = %v; want ErrStaleToken (or ErrNotHeld once the loss is known)", err)
	} else if err == nil {
		t.Fatal("a stale FencedWrite landed")
	}
}
