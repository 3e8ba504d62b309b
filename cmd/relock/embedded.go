package main

import (
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/internal/stepclock"
)

// The servers relock demo can start for itself (--embedded).
const (
	embedAuto        = "auto"         // redis-server when it is on PATH (or $RELOCK_REDIS_SERVER names one), else in-process
	embedRedisServer = "redis-server" // a redis-server child process on a free loopback port
	embedInProcess   = "inprocess"    // miniredis, in this process, on a free loopback port
)

// embeddedRedis is a Redis server the demo started, and stops when it ends.
type embeddedRedis struct {
	addr string // 127.0.0.1:port
	kind string // embedRedisServer or embedInProcess
	stop func()
}

// startEmbedded starts n independent servers (n > 1 for a RedLock's masters) in the given mode and
// returns them with a note for the user ("" when there is nothing to say). In auto mode, a redis-server
// that is on PATH but fails to start is mentioned in the note, and in-process servers are used instead.
// On error, the servers already started are stopped.
func startEmbedded(mode string, n int) ([]*embeddedRedis, string, error) {
	start := map[string]func() (*embeddedRedis, error){
		embedRedisServer: startRedisServer,
		embedInProcess:   startInProcess,
	}
	note := ""
	if mode == embedAuto {
		mode = embedInProcess
		if _, err := redistest.ServerPath(); err == nil {
			mode = embedRedisServer
		}
		servers, err := startN(start[mode], n)
		if err == nil || mode == embedInProcess {
			return servers, note, err
		}
		note = fmt.Sprintf("%v; using in-process servers instead", err)
		mode = embedInProcess
	}
	fn, ok := start[mode]
	if !ok {
		return nil, "", fmt.Errorf("%w: --embedded %q: want auto, redis-server or inprocess", errUsage, mode)
	}
	servers, err := startN(fn, n)
	return servers, note, err
}

// startN starts n servers with start; on error it stops those already started.
func startN(start func() (*embeddedRedis, error), n int) ([]*embeddedRedis, error) {
	servers := make([]*embeddedRedis, 0, n)
	for len(servers) < n {
		s, err := start()
		if err != nil {
			stopEmbedded(servers)
			return nil, err
		}
		servers = append(servers, s)
	}
	return servers, nil
}

// startRedisServer starts a redis-server child process (persistence off) on a free loopback port.
func startRedisServer() (*embeddedRedis, error) {
	s, err := redistest.StartServer()
	if err != nil {
		return nil, fmt.Errorf("starting an embedded redis-server: %w", err)
	}
	return &embeddedRedis{addr: s.Addr(), kind: embedRedisServer, stop: func() { _ = s.Stop() }}, nil
}

// startInProcess starts a miniredis server in this process on a free loopback port.
//
// miniredis only advances key TTLs when told to. stepclock makes it age them by the wall-clock time
// elapsed since the previous command, as each command arrives (not during a script, as on Redis): TTLs
// then run in real time, exactly (no ticker granularity), and agree with TIME, which miniredis answers
// from the same clock. Expired keys are removed lazily, on the next access, which is all relock needs: its
// waiters retry when the holder's PTTL runs out, they do not rely on keyspace notifications.
//
// Clients must connect with rueidis's ForceSingleClient: miniredis answers CLUSTER SLOTS, so rueidis
// would otherwise take it for a cluster, and relock would use sharded pub/sub (SPUBLISH, SSUBSCRIBE),
// which miniredis lacks.
func startInProcess() (*embeddedRedis, error) {
	m := miniredis.NewMiniRedis()
	clock := stepclock.Start(m)
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("starting an in-process Redis: %w", err)
	}
	m.Server().SetPreHook(func(*server.Peer, string, ...string) bool {
		clock.Command()
		return false
	})
	return &embeddedRedis{addr: m.Addr(), kind: embedInProcess, stop: m.Close}, nil
}

// stopEmbedded stops servers, in reverse order.
func stopEmbedded(servers []*embeddedRedis) {
	for i := len(servers) - 1; i >= 0; i-- {
		servers[i].stop()
	}
}
