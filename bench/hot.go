package main

import (
	"context"
	"fmt"
	"log"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// hotResult is what a hot-lock run measured.
type hotResult struct {
	total     int             // acquisitions
	perClient []int           // acquisitions per handle (Client)
	minOwner  int             // fewest acquisitions by one goroutine
	waits     []time.Duration // each acquisition's lock call, sorted
	overlaps  int             // acquisitions made while another goroutine was inside: a broken lock
}

// hammer runs perHandle goroutines on each handle of ls, all after one key, for d: each takes the lock,
// leaves at once and tries again. It records every lock call's duration, the acquisitions per handle and
// per goroutine, and whether two goroutines were ever inside at once.
func hammer(ctx context.Context, ls []locker, perHandle int, key string, d time.Duration) hotResult {
	var (
		mu       sync.Mutex
		waits    []time.Duration
		counts   = make([]int, len(ls)*perHandle)
		inside   atomic.Int32
		overlaps atomic.Int64
		wg       sync.WaitGroup
	)
	end := time.Now().Add(d)
	for g := range counts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := ls[g/perHandle]
			var mine []time.Duration
			defer func() {
				mu.Lock()
				waits = append(waits, mine...)
				mu.Unlock()
			}()
			for time.Now().Before(end) {
				lctx, cancel := context.WithDeadline(ctx, end.Add(time.Second))
				from := time.Now()
				unlock, err := l.lock(lctx, key)
				if err != nil {
					cancel()
					if tolerate(err) {
						continue // counted as hung
					}
					return // the run ended while waiting
				}
				mine = append(mine, time.Since(from))
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				counts[g]++
				inside.Add(-1)
				err = unlock()
				cancel()
				if err != nil && !tolerate(err) {
					log.Fatal(err)
				}
			}
		}()
	}
	wg.Wait()
	slices.Sort(waits)
	res := hotResult{perClient: make([]int, len(ls)), minOwner: slices.Min(counts), waits: waits, overlaps: int(overlaps.Load())}
	for g, c := range counts {
		res.total += c
		res.perClient[g/perHandle] += c
	}
	return res
}

// hot: one lock, every goroutine taking it, leaving at once and taking it again: 64 goroutines on one
// Client, then 16 goroutines on each of 4 Clients, every library (each peer in its defaults and in its best
// configuration) on the server at addr.
func hot(r *report, addr string) {
	ctx := context.Background()
	each := dur(4 * time.Second)
	sec := section{title: "11. Hot lock: one lock, many goroutines",
		note: fmt.Sprintf("One lock, every goroutine taking it, leaving at once (no work inside) and taking it again, for %s: 64 goroutines on one Client (handle), then 16 on each of 4 Clients. ", each) +
			"Acquisitions per second; wait p50/p99/max: each Lock call's duration; min per goroutine: the fewest acquisitions one goroutine made; Client shares: each Client's acquisitions against a fair share (a quarter), the smallest and the largest. Overlaps: acquisitions made while another goroutine was inside (any is a broken lock). Hung as in section 3. " +
			"The floor is what a lock costs that needs one round trip per holder, with the same goroutine hops: a token passed between the goroutines in the process, each of which, once it has it, sends one PING before it counts an acquisition (a lock whose holders Redis records pays at least that: the previous holder's release must reach Redis before the next may hold). " +
			"Targets: relock ≥ 2 × the best peer with one Client, ≥ 1.5 × with 4 Clients, each Client's share within 0.5–2 × a fair share.",
		head: []string{"", "Clients × goroutines", "acquisitions/s", "wait p50", "wait p99", "wait max", "min per goroutine", "Client shares", "overlaps", "hung"}}
	rates := map[string]map[int]float64{}
	shares := map[string][2]float64{}
	overlaps := 0
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		log.Fatal(err)
	}
	defer rdb.Close()
	for _, shape := range [][2]int{{1, 64}, {4, 16}} {
		clients, per := shape[0], shape[1]
		var handles [][]locker // per Client, every library
		floor := &bounded{locker: newHandoffFloor(rdb)}
		for range clients {
			handles = append(handles, append([]locker{floor}, peers(addr)...))
		}
		for i := range handles[0] {
			var ls []locker
			for _, h := range handles {
				ls = append(ls, h[i])
			}
			name := ls[0].name()
			h := hammer(ctx, ls, per, fmt.Sprintf("bench:hot:%s:%d", name, clients), each)
			overlaps += h.overlaps
			rate := float64(h.total) / each.Seconds()
			if rates[name] == nil {
				rates[name] = map[int]float64{}
			}
			rates[name][clients] = rate
			share := ""
			if clients > 1 {
				fair := float64(h.total) / float64(clients)
				lo, hi := float64(slices.Min(h.perClient))/fair, float64(slices.Max(h.perClient))/fair
				share = fmt.Sprintf("%.2f–%.2f ×", lo, hi)
				shares[name] = [2]float64{lo, hi}
			}
			sec.rows = append(sec.rows, []string{name, fmt.Sprintf("%d × %d", clients, per), fmt.Sprintf("%.0f", rate),
				us(pct(h.waits, .5)), us(pct(h.waits, .99)), ms(pct(h.waits, 1)), fmt.Sprint(h.minOwner), share,
				fmt.Sprint(h.overlaps), hungCount(ls...)})
		}
		for _, h := range handles {
			closeAll(h[1:]) // the floor's client is closed at the end
		}
	}
	sec.verdicts = append(sec.verdicts, verdict(overlaps == 0, "%d overlapping holds (target 0)", overlaps))
	for _, shape := range []struct {
		clients int
		target  float64
	}{{1, 2}, {4, 1.5}} {
		best, bestName := 0.0, ""
		for name, rs := range rates {
			if name != "relock" && name != floorName && rs[shape.clients] > best {
				best, bestName = rs[shape.clients], name
			}
		}
		rl := rates["relock"][shape.clients]
		fl := rates[floorName][shape.clients]
		sec.verdicts = append(sec.verdicts, verdict(best > 0 && rl >= shape.target*best,
			"%d Client(s): relock %.0f acquisitions/s = %.2f × the best peer, %s (target ≥ %.1f ×); %.2f × the floor of one round trip per acquisition", shape.clients, rl, rl/max(best, 1), bestName, shape.target, rl/max(fl, 1)))
	}
	s := shares["relock"]
	sec.verdicts = append(sec.verdicts, verdict(s[0] >= 0.5 && s[1] <= 2, "4 Clients: relock's Client shares %.2f–%.2f × a fair share (target 0.5–2 ×)", s[0], s[1]))
	r.add(sec)
}

// floorName names the hot scenario's floor (newHandoffFloor).
const floorName = "floor: one round trip per holder"

// handoffFloor is the hot scenario's floor: a token passed between the goroutines of the process (one
// holder at a time, as with a lock), where each new holder pays one round trip (a PING) before it holds.
type handoffFloor struct {
	rdb   rueidis.Client
	token chan struct{}
}

func newHandoffFloor(rdb rueidis.Client) *handoffFloor {
	f := &handoffFloor{rdb: rdb, token: make(chan struct{}, 1)}
	f.token <- struct{}{}
	return f
}

func (f *handoffFloor) name() string { return floorName }

func (f *handoffFloor) lock(ctx context.Context, _ string) (func() error, error) {
	select {
	case <-f.token:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := f.rdb.Do(ctx, f.rdb.B().Ping().Build()).Error(); err != nil {
		f.token <- struct{}{}
		return nil, err
	}
	return func() error { f.token <- struct{}{}; return nil }, nil
}

func (f *handoffFloor) close() {}
