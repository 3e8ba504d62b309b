package relock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// releaseChannel is the channel on which the releases of the RLock name (a name without braces) are
// announced, by relock and by Redisson.
func releaseChannel(name string) string { return "redisson_lock__channel:{" + name + "}" }

// pubsubKind names a kind of pub/sub in failure messages.
func pubsubKind(sharded bool) string {
	if sharded {
		return "sharded pub/sub"
	}
	return "plain pub/sub"
}

// nodeClients returns a client on each running node of d, each talking to its node alone.
func nodeClients(t testing.TB, d *deployment) []rueidis.Client {
	t.Helper()
	var nodes []rueidis.Client
	for _, s := range d.servers {
		if !s.Running() {
			continue
		}
		node, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr()}, DisableCache: true, ForceSingleClient: true})
		if err != nil {
			t.Fatalf("connecting to %s: %v", s.Addr(), err)
		}
		t.Cleanup(node.Close)
		nodes = append(nodes, node)
	}
	return nodes
}

// subscribers counts the subscriptions to channel on every node of nodes: sharded ones (PUBSUB
// SHARDNUMSUB) or plain ones (PUBSUB NUMSUB). Each node counts only its own. A node that does not answer
// counts none.
func subscribers(t testing.TB, nodes []rueidis.Client, channel string, sharded bool) int64 {
	t.Helper()
	var total int64
	for _, node := range nodes {
		cmd := node.B().PubsubNumsub().Channel(channel).Build()
		if sharded {
			cmd = node.B().PubsubShardnumsub().Channel(channel).Build()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		vals, err := node.Do(ctx, cmd).ToArray()
		cancel()
		if err != nil || len(vals) != 2 {
			continue
		}
		n, _ := vals[1].AsInt64()
		total += n
	}
	return total
}

// listen subscribes rdb to channel, with SSUBSCRIBE when sharded and SUBSCRIBE otherwise, and returns once
// Redis has confirmed it. The messages it hears arrive on the returned channel.
func listen(t testing.TB, rdb rueidis.Client, channel string, sharded bool) <-chan string {
	t.Helper()
	cmd, kind := rdb.B().Subscribe().Channel(channel).Build(), "subscribe"
	if sharded {
		cmd, kind = rdb.B().Ssubscribe().Channel(channel).Build(), "ssubscribe"
	}
	msgs := make(chan string, 16)
	confirmed := make(chan struct{})
	var once sync.Once
	ctx, cancel := context.WithCancel(context.Background())
	hctx := rueidis.WithOnSubscriptionHook(ctx, func(s rueidis.PubSubSubscription) {
		if s.Kind == kind {
			once.Do(func() { close(confirmed) })
		}
	})
	// ended is closed when Receive returns, with its error in err: the cleanup and a failed subscription
	// both wait for it (a value sent on a channel could be taken only once).
	ended := make(chan struct{})
	var err error
	go func() {
		defer close(ended)
		err = rdb.Receive(hctx, cmd, func(m rueidis.PubSubMessage) {
			select {
			case msgs <- m.Message:
			default:
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-ended
	})
	select {
	case <-confirmed:
	case <-ended:
		t.Fatalf("%s %s: %v", kind, channel, err)
	case <-time.After(5 * time.Second):
		t.Fatalf("%s %s: not confirmed", kind, channel)
	}
	return msgs
}

// releaseLikeRedisson does what a Java service's Redisson does when it releases the last hold of the
// RLock name: delete the lock and announce the release, with SPUBLISH when its shardedSubscriptionMode
// makes it use sharded pub/sub, PUBLISH otherwise. A command that fails (a failover under way) is sent
// again.
func releaseLikeRedisson(t testing.TB, rdb rueidis.Client, name string, sharded bool) {
	t.Helper()
	announce := rdb.B().Publish().Channel(releaseChannel(name)).Message("0").Build()
	if sharded {
		announce = rdb.B().Spublish().Channel(releaseChannel(name)).Message("0").Build()
	}
	for _, cmd := range []rueidis.Completed{rdb.B().Del().Key(name).Build().Pin(), announce.Pin()} { // Pin: may be sent again
		eventually(t, 20*time.Second, "Redis runs "+cmd.Commands()[0], func() bool {
			return rdb.Do(context.Background(), cmd).Error() == nil
		})
	}
}

// checkReleasesAnnounced makes waiter wait for a lock that holder holds with a long lease, and checks that
// a Java-side release announced with sharded or plain pub/sub, as said, wakes it at once, that the waiter
// subscribed that way only, and that its own release is heard by listeners of that kind and by no
// listener of the other kind, on any node (on Redis 6.2, which has no sharded pub/sub, plain listeners
// only).
func checkReleasesAnnounced(t *testing.T, d *deployment, holder, waiter *relock.Client, sharded bool) {
	rdb, nodes := d.raw(t), nodeClients(t, d)
	ctx := ctxTimeout(t, 60*time.Second)
	name := d.name("lock")
	channel := releaseChannel(name)
	// Only a release message can wake the waiter in time: the hold it waits for lasts a minute.
	if err := holder.Lock(name).LockWithLease(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	owner := relock.WithOwner(ctx, "waiter")
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(name).Lock(owner) }()
	eventually(t, 10*time.Second, "the waiter subscribes with "+pubsubKind(sharded),
		func() bool { return subscribers(t, nodes, channel, sharded) == 1 },
		func() string {
			return "subscribed with " + pubsubKind(!sharded) + ": " + strconv.FormatInt(subscribers(t, nodes, channel, !sharded), 10)
		})
	if n := subscribers(t, nodes, channel, !sharded); n != 0 {
		t.Fatalf("the waiter has %d subscriptions with %s too", n, pubsubKind(!sharded))
	}
	releaseLikeRedisson(t, rdb, name, sharded)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the waiter was not woken by a Redisson release announced with %s", pubsubKind(sharded))
	}

	// relock's own release, as a Java service configured alike hears it.
	var heard, deaf []<-chan string
	if sharded {
		heard = append(heard, listen(t, rdb, channel, true)) // on the shard of the channel's slot
		for _, node := range nodes {
			deaf = append(deaf, listen(t, node, channel, false))
		}
	} else {
		for _, node := range nodes { // plain pub/sub reaches every node
			heard = append(heard, listen(t, node, channel, false))
		}
		if hasShardedPubSub(t) {
			deaf = append(deaf, listen(t, rdb, channel, true))
		}
	}
	if err := waiter.Lock(name).Unlock(owner); err != nil {
		t.Fatal(err)
	}
	for i, msgs := range heard {
		select {
		case m := <-msgs:
			if m != "0" {
				t.Fatalf("listener %d heard %q, want the unlock message \"0\"", i, m)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s listener %d of %d did not hear relock's release", pubsubKind(sharded), i+1, len(heard))
		}
	}
	time.Sleep(200 * time.Millisecond) // the cluster bus carries messages to other nodes within this
	for _, msgs := range deaf {
		select {
		case m := <-msgs:
			t.Fatalf("a %s listener heard %q: relock announced its release both ways", pubsubKind(!sharded), m)
		default:
		}
	}
}

// Each ShardedPubSub setting announces releases, and listens for them, the way Redisson does with the same
// shardedSubscriptionMode; on Redis 7, AUTO is ON. On Redis 6.2, which has no sharded pub/sub, AUTO is OFF,
// and ON, which fails there, is not run.
func TestClusterShardedPubSubModes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		mode    relock.ShardedPubSub
		sharded bool
	}{
		{"ON", relock.ShardedPubSubOn, true},
		{"AUTO", relock.ShardedPubSubAuto, true},
		{"OFF", relock.ShardedPubSubOff, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sharded, want := tc.sharded, "sharded"
			if v := serverVersion(t); !v.AtLeast(7, 0) {
				if tc.mode == relock.ShardedPubSubOn {
					t.Skipf("redis-server %v has no sharded pub/sub (SSUBSCRIBE, SPUBLISH: Redis 7.0), which ShardedPubSubOn needs", v)
				}
				sharded, want = false, "plain" // AUTO finds it missing, as Redisson's AUTO does
			}
			d := onCluster(t, t.Name()+":")
			opts := &relock.Options{ShardedPubSub: tc.mode}
			holder, waiter := d.client(t, opts), d.client(t, opts)
			checkReleasesAnnounced(t, d, holder, waiter, sharded)
			if tc.mode == relock.ShardedPubSubAuto {
				// AUTO found out at the waiter's first wait; the holder has only acquired, which needs nothing.
				if got := relock.PubSubKnown(waiter); got != want {
					t.Errorf("AUTO on Redis %v settled on %q, want %s", serverVersion(t), got, want)
				}
				if got := relock.PubSubKnown(holder); got != "" {
					t.Errorf("AUTO settled on %q before anything needed it", got)
				}
			}
		})
	}
}

// When the probe of AUTO gets an error reply, as from Redis 6, which does not know PUBSUB SHARDNUMSUB,
// relock uses plain pub/sub, as Redisson does. Here an ACL denies the probe to relock's user; on Redis 6.2
// (which cannot deny a subcommand) the server itself refuses it.
func TestClusterShardedPubSubAutoUsesPlainWhenProbeIsRefused(t *testing.T) {
	t.Parallel()
	d := onCluster(t, t.Name()+":")
	opts := &relock.Options{} // AUTO
	if hasShardedPubSub(t) {
		user, password := "relock-no-shardnumsub-"+strconv.FormatInt(time.Now().UnixNano(), 36), "secret"
		for _, node := range nodeClients(t, d) {
			if err := node.Do(context.Background(), node.B().Arbitrary("ACL", "SETUSER", user, "on", ">"+password,
				"~*", "&*", "+@all", "-pubsub|shardnumsub").Build()).Error(); err != nil {
				t.Fatalf("ACL SETUSER: %v", err)
			}
			t.Cleanup(func() { node.Do(context.Background(), node.B().AclDeluser().Username(user).Build()) })
		}
		opts.Redis = rueidis.ClientOption{Username: user, Password: password}
	}
	holder, waiter := d.client(t, opts), d.client(t, opts)

	ctx := ctxTimeout(t, 10*time.Second)
	sharded, err := relock.ShardedPubSubFor(ctx, waiter, releaseChannel(d.name("probe")))
	if sharded || err != nil {
		t.Fatalf("a refused probe gave sharded = %v, %v; want plain pub/sub", sharded, err)
	}
	if got := relock.PubSubKnown(waiter); got != "plain" {
		t.Fatalf("after a refused probe, the Client knows %q, want plain", got)
	}
	checkReleasesAnnounced(t, d, holder, waiter, false)
}

// A probe that gets no reply settles nothing: a call whose context ends first fails, and the next needs
// ask again (or wait for the question still under way). Once answered, the answer is kept, and no call
// waits for Redis to learn it. (The answer is sharded pub/sub on Redis 7, plain on 6.2, which refuses the
// probe.)
func TestClusterShardedPubSubAutoProbeWithoutReplyIsRetried(t *testing.T) {
	t.Parallel()
	c, channel, master := autoProbeCluster(t)
	if err := master.Pause(); err != nil {
		t.Fatal(err)
	}
	_, err := relock.ShardedPubSubFor(ctxTimeout(t, 300*time.Millisecond), c, channel)
	known := relock.PubSubKnown(c)
	if resumeErr := master.Resume(); resumeErr != nil {
		t.Fatal(resumeErr)
	}
	if err == nil {
		t.Fatal("a probe to a paused node succeeded")
	}
	if known != "" {
		t.Fatalf("an unanswered probe settled on %q", known)
	}
	// The next needs ask again. (The first may still fail: rueidis may be reconnecting to the node that
	// did not answer, under the ended context of the call that found it broken.)
	var sharded bool
	eventually(t, 10*time.Second, "a probe is answered", func() bool {
		sharded, err = relock.ShardedPubSubFor(ctxTimeout(t, time.Second), c, channel)
		return err == nil
	}, func() string { return "last error: " + err.Error() })
	want := hasShardedPubSub(t)
	if sharded != want {
		t.Fatalf("the answered probe settled on %s; want %s (Redis %v)", pubsubKind(sharded), pubsubKind(want), serverVersion(t))
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if sharded, err := relock.ShardedPubSubFor(ended, c, channel); sharded != want || err != nil {
		t.Fatalf("once known, a call with an ended context gave %v, %v", sharded, err)
	}
}

// The calls that need ShardedPubSubAuto's answer at the same time share one question: a call whose context
// ends while the question is unanswered costs the others nothing, and they get its answer, not a question
// each. (The answer is sharded pub/sub on Redis 7, plain on 6.2, which refuses the probe.)
func TestClusterShardedPubSubAutoAsksOnceForConcurrentCalls(t *testing.T) {
	t.Parallel()
	c, channel, master := autoProbeCluster(t)
	node, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{master.Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	ctx := ctxTimeout(t, 30*time.Second)
	if err := node.Do(ctx, node.B().ConfigResetstat().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := master.Pause(); err != nil {
		t.Fatal(err)
	}
	_, short := relock.ShardedPubSubFor(ctxTimeout(t, 300*time.Millisecond), c, channel)
	type answer struct {
		sharded bool
		err     error
	}
	later, laterCtx := make(chan answer, 1), ctxTimeout(t, 20*time.Second)
	go func() {
		sharded, err := relock.ShardedPubSubFor(laterCtx, c, channel)
		later <- answer{sharded, err}
	}()
	time.Sleep(300 * time.Millisecond) // the later call waits for the answer
	if err := master.Resume(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(short, context.DeadlineExceeded) {
		t.Fatalf("the call whose context ended first gave %v, want its deadline", short)
	}
	if a := <-later; a.sharded != hasShardedPubSub(t) || a.err != nil {
		t.Fatalf("the later call gave %v, %v; want %s (Redis %v)", a.sharded, a.err, pubsubKind(hasShardedPubSub(t)), serverVersion(t))
	}
	stats, err := node.Do(ctx, node.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	if got := probesIn(t, stats); got != 1 {
		t.Fatalf("the node was asked %d times, want once:\n%s", got, stats)
	}
}

// autoProbeCluster starts a cluster and a Client of it with ShardedPubSubAuto, and returns the Client, a
// channel, and the node a probe for that channel asks.
func autoProbeCluster(t *testing.T) (*relock.Client, string, *redistest.Server) {
	t.Helper()
	cl := redistest.StartCluster(t, 3, 0)
	c, err := relock.New(cl.Addrs(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	channel := releaseChannel("probe")
	master, err := cl.MasterOf(channel)
	if err != nil {
		t.Fatal(err)
	}
	return c, channel, master
}

// probesIn returns how many PUBSUB SHARDNUMSUB commands INFO commandstats counts: Redis 7 counts them as
// "pubsub|shardnumsub"; 6.2, which refuses them (a failed call), counts every PUBSUB subcommand as "pubsub".
func probesIn(t testing.TB, stats string) int {
	stat := "cmdstat_pubsub|shardnumsub:calls="
	if !hasShardedPubSub(t) {
		stat = "cmdstat_pubsub:calls="
	}
	for line := range strings.Lines(stats) {
		if rest, ok := strings.CutPrefix(line, stat); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// With plain pub/sub, a waiter's subscription lives on any one node: when that node fails, it is made
// again on another, and a release announced afterwards still wakes the waiter.
func TestClusterPlainPubSubResubscribesAfterNodeFailure(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	d := &deployment{kind: "cluster", addrs: cl.Addrs(), servers: cl.Servers}
	opts := &relock.Options{ShardedPubSub: relock.ShardedPubSubOff, WatchdogTimeout: 6 * time.Second}
	holder, waiter := d.client(t, opts), d.client(t, opts)
	rdb := d.raw(t)
	ctx := ctxTimeout(t, 90*time.Second)
	const name = "plain-failover"
	channel := releaseChannel(name)
	// A replica has the hold before Lock returns, so the hold outlives a failover of its master; only a
	// release message can wake the waiter in time.
	if err := holder.Lock(name, relock.WithReplicaAck(1, time.Second)).LockWithLease(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(name).Lock(ctx) }()

	nodes := nodeClients(t, d) // nodes[i] talks to cl.Servers[i]
	// subscribedOn returns the running nodes where channel has a plain subscriber.
	subscribedOn := func() []*redistest.Server {
		var on []*redistest.Server
		for i, s := range cl.Servers {
			if s.Running() && subscribers(t, nodes[i:i+1], channel, false) > 0 {
				on = append(on, s)
			}
		}
		return on
	}
	eventually(t, 10*time.Second, "the waiter subscribes on one node", func() bool { return len(subscribedOn()) == 1 })
	node := subscribedOn()[0]
	if err := node.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitOK(30 * time.Second); err != nil { // a replica took over if the node was a master
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the waiter subscribes again on another node", func() bool { return len(subscribedOn()) == 1 })
	if n, err := rdb.Do(ctx, rdb.B().Exists().Key(name).Build()).AsInt64(); n != 1 || err != nil {
		t.Fatalf("the hold did not survive the failover (%d, %v): nothing left to wait for", n, err)
	}
	select {
	case err := <-got:
		t.Fatalf("the waiter returned before the release: %v", err)
	default:
	}
	releaseLikeRedisson(t, rdb, name, false)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not woken by a release announced after its node failed")
	}
}
