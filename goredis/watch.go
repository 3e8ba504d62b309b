package relockgoredis

import (
	"context"
	"crypto/tls"
	"net"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// watchConn is the connection of relock's watch of holds on a single server: go-redis gives no
// connection with CLIENT TRACKING's invalidations, so it is a rueidis connection made from rdb's own
// options (its dialer, which connects to the address and does TLS, a failover client's to Sentinel's
// current master; its user, password or credentials provider, database and client name). Closing it
// closes the rueidis client it came from.
type watchConn struct {
	rueidis.DedicatedClient
	rdb rueidis.Client // nil for a connection that could not be opened
}

func (w watchConn) Close() {
	w.DedicatedClient.Close()
	if w.rdb != nil {
		w.rdb.Close()
	}
}

// openWatch makes the watch's connection for a *redis.Client (a cluster's watch is relock's own concern:
// relock turns it off for a client it did not make).
func openWatch(rdb redis.UniversalClient) (*watchConn, error) {
	c, ok := rdb.(*redis.Client)
	if !ok {
		return nil, errNotSupported
	}
	o := c.Options()
	opt := rueidis.ClientOption{
		InitAddress:       []string{o.Addr},
		Username:          o.Username,
		Password:          o.Password,
		SelectDB:          o.DB,
		ClientName:        o.ClientName,
		DisableCache:      true,
		DisableRetry:      true,
		ForceSingleClient: true,
		Dialer:            net.Dialer{Timeout: o.DialTimeout},
		DialCtxFn: func(ctx context.Context, _ string, _ *net.Dialer, _ *tls.Config) (net.Conn, error) {
			return o.Dialer(ctx, o.Network, o.Addr)
		},
	}
	if o.CredentialsProvider != nil {
		opt.AuthCredentialsFn = func(rueidis.AuthCredentialsContext) (rueidis.AuthCredentials, error) {
			user, pass := o.CredentialsProvider()
			return rueidis.AuthCredentials{Username: user, Password: pass}, nil
		}
	}
	w, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, err
	}
	conn, _ := w.Dedicate() // closed with watchConn, never given back (see relock's holdwatch_link.go)
	return &watchConn{DedicatedClient: conn, rdb: w}, nil
}

// failed stands for a watch connection that could not be opened: every call fails with err.
type failed struct{ err error }

func (f failed) B() rueidis.Builder { return builder }
func (f failed) Do(context.Context, rueidis.Completed) rueidis.RedisResult {
	return rueidis.NewErrorResult(f.err)
}
func (f failed) DoMulti(_ context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	results := make([]rueidis.RedisResult, len(multi))
	for i := range results {
		results[i] = rueidis.NewErrorResult(f.err)
	}
	return results
}
func (f failed) Receive(context.Context, rueidis.Completed, func(rueidis.PubSubMessage)) error {
	return f.err
}
func (f failed) Close() {}
func (f failed) SetPubSubHooks(rueidis.PubSubHooks) <-chan error {
	gone := make(chan error, 1)
	gone <- f.err
	close(gone)
	return gone
}
func (f failed) SetOnInvalidations(func([]rueidis.RedisMessage)) <-chan error {
	return f.SetPubSubHooks(rueidis.PubSubHooks{})
}
