package main

import (
	"strings"
	"testing"
	"time"

	"github.com/relock-go/relock"
)

// What changes says when a holder is gone: released while watch could see releases, disappeared when it
// could not, or when the fencing counter went back with it (an alarm).
func TestWatchChangesOfAHolderGone(t *testing.T) {
	h := relock.Holder{Owner: "c:w1", ClientID: "c", Token: "w1", Count: 1, TTL: 20 * time.Second}
	held := relock.LockState{Name: "x", Kind: relock.KindRLock, Locked: true, Holders: []relock.Holder{h}, TTL: h.TTL}
	free := relock.LockState{Name: "x"}
	fenced, freeFenced := held, free
	fenced.FencingToken, freeFenced.FencingToken = 5, 5
	for _, tc := range []struct {
		name   string
		a, b   relock.LockState
		unseen bool
		want   []string
	}{
		{"released", held, free, false, []string{watchEvReleased}},
		{"unseen", held, free, true, []string{watchEvDisappeared}},
		{"fenced released", fenced, freeFenced, false, []string{watchEvReleased}},
		{"counter lost", fenced, free, false, []string{watchEvDisappeared, watchEvFencingBack}},
		{"counter lost unseen", fenced, free, true, []string{watchEvDisappeared, watchEvFencingBack}},
		{"counter went back, holder kept", fenced, func() relock.LockState { s := fenced; s.FencingToken = 3; return s }(), false, []string{watchEvFencingBack}},
	} {
		var got []string
		for _, ch := range changes(tc.a, tc.b, 100*time.Millisecond, tc.unseen) {
			got = append(got, ch.event)
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
