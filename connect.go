package relock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/redisaddr"
)

// How New reaches Redis: the rueidis options it makes of its addresses and Options.Redis, a dial bounded by
// New's context, and connections that tell the Client when they break.

// redisOption returns the rueidis configuration New makes from addrs (see NewContext) and base, what
// Options.Redis says.
func redisOption(addrs []string, base rueidis.ClientOption) (rueidis.ClientOption, error) {
	if len(addrs) == 0 {
		addrs = base.InitAddress
		if len(addrs) == 0 {
			return base, errorf("%w: no Redis address: addrs and Options.Redis.InitAddress are both empty", ErrInvalidOptions)
		}
	}
	parsed, err := redisaddr.Parse(addrs)
	if err != nil {
		return base, errorf("%w: %v", ErrInvalidOptions, err)
	}
	ro := base
	ro.InitAddress = parsed.InitAddress
	if !strings.Contains(addrs[0], "://") {
		return ro, nil
	}
	// What the URL says of the connection.
	if parsed.Username != "" || parsed.Password != "" {
		ro.Username, ro.Password = parsed.Username, parsed.Password
	}
	if parsed.SelectDB != 0 {
		ro.SelectDB = parsed.SelectDB
	}
	if parsed.TLSConfig != nil && ro.TLSConfig == nil {
		ro.TLSConfig = parsed.TLSConfig
	}
	if parsed.Dialer.Timeout != 0 {
		ro.Dialer.Timeout = parsed.Dialer.Timeout
	}
	if parsed.ConnWriteTimeout != 0 {
		ro.ConnWriteTimeout = parsed.ConnWriteTimeout
	}
	if parsed.DialCtxFn != nil { // unix://
		ro.DialCtxFn = parsed.DialCtxFn
	}
	if parsed.ClientName != "" {
		ro.ClientName = parsed.ClientName
	}
	if parsed.Sentinel.MasterSet != "" {
		ro.Sentinel.MasterSet = parsed.Sentinel.MasterSet
	}
	ro.AlwaysRESP2 = ro.AlwaysRESP2 || parsed.AlwaysRESP2
	return ro, nil
}

// connect makes the rueidis client of ro, within ctx: the dial timeout is cut to ctx's deadline, and a ctx
// that ends first abandons the attempt (the client it may still make is closed).
func connect(ctx context.Context, ro rueidis.ClientOption) (rueidis.Client, error) {
	if ro.Dialer.Timeout <= 0 {
		ro.Dialer.Timeout = rueidis.DefaultDialTimeout
	}
	if dl, ok := ctx.Deadline(); ok {
		ro.Dialer.Timeout = max(min(ro.Dialer.Timeout, time.Until(dl)), time.Millisecond)
	}
	type made struct {
		rdb rueidis.Client
		err error
	}
	done := make(chan made, 1)
	go func() {
		rdb, err := rueidis.NewClient(ro)
		done <- made{rdb, err}
	}()
	select {
	case m := <-done:
		if m.err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return nil, errorf("%w: %w (%w)", ErrUnavailable, cerr, m.err)
			}
			return nil, connectError(m.err)
		}
		return m.rdb, nil
	case <-ctx.Done():
		go func() { // the attempt ends within the dial timeout; close what it makes
			if m := <-done; m.rdb != nil {
				m.rdb.Close()
			}
		}()
		return nil, errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
}

// watchConns returns ro's dial function, whose connections tell the Client's guard (once there is a
// Client) when they break: the calls that then find the connection being dialled again wait for the dial
// whatever their context (see callGuard). rueidis reads a connection that pipelines all the time, and so
// sees it break, and dials it again, before any call does. (A connection that is not a *net.TCPConn or a
// *tls.Conn is one rueidis cannot turn Nagle's algorithm on for: with DisableTCPNoDelay, connections are
// left unwatched.)
func watchConns(ro rueidis.ClientOption, guard *atomic.Pointer[callGuard]) func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	dialCtx, dialFn := ro.DialCtxFn, ro.DialFn
	dial := func(ctx context.Context, dst string, dialer *net.Dialer, cfg *tls.Config) (net.Conn, error) {
		switch { // rueidis's own choice, when no DialCtxFn takes its place
		case dialCtx != nil:
			return dialCtx(ctx, dst, dialer, cfg)
		case dialFn != nil:
			return dialFn(dst, dialer, cfg)
		case cfg != nil:
			return dialTLS(ctx, dst, dialer, cfg)
		}
		return dialer.DialContext(ctx, "tcp", dst)
	}
	if ro.DisableTCPNoDelay {
		return dial
	}
	return func(ctx context.Context, dst string, dialer *net.Dialer, cfg *tls.Config) (net.Conn, error) {
		// Calls that wait for this connection wait for its dial and handshake, whatever their contexts:
		// they are guarded until its first read ends (see callGuard).
		g := guard.Load()
		if g != nil {
			g.dialing.Add(1)
		}
		conn, err := dial(ctx, dst, dialer, cfg)
		if err != nil {
			if g != nil {
				g.dialing.Add(-1)
			}
			return nil, err
		}
		w := &watchedConn{Conn: conn, guard: guard}
		if g != nil {
			w.dialed.Store(g)
		}
		return w, nil
	}
}

// watchedConn is a connection of New's rueidis client: a read that fails (the connection broke, or is
// being closed) tells the Client's guard, and so does the end of its first read, the handshake's reply.
type watchedConn struct {
	net.Conn
	guard  *atomic.Pointer[callGuard]
	dialed atomic.Pointer[callGuard] // the guard that counts this connection's dial, until its first read ends
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.handshaken()
	if err != nil {
		if g := c.guard.Load(); g != nil {
			g.broke()
		}
	}
	return n, err
}

func (c *watchedConn) Close() error {
	c.handshaken()
	return c.Conn.Close()
}

// handshaken tells the guard, once, that the connection's dial and handshake are over.
func (c *watchedConn) handshaken() {
	if g := c.dialed.Swap(nil); g != nil {
		g.dialing.Add(-1)
	}
}

// dialTLS dials dst and makes the TLS handshake, within dialer.Timeout for both, as tls.Dialer does; a
// handshake that gets no answer, or an answer that is not TLS, says that the server may not speak TLS
// (a rediss:// URL, or a TLSConfig, given for a plain-TCP port hangs until the dial timeout: Redis waits
// for the rest of a command line that the ClientHello never ends).
func dialTLS(ctx context.Context, dst string, dialer *net.Dialer, cfg *tls.Config) (net.Conn, error) {
	if dialer.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, dialer.Timeout)
		defer cancel()
	}
	raw, err := dialer.DialContext(ctx, "tcp", dst)
	if err != nil {
		return nil, err
	}
	if cfg.ServerName == "" { // as tls.Dialer does: the name to verify is the address's host
		host, _, _ := net.SplitHostPort(dst)
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	conn := tls.Client(raw, cfg)
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		var notTLS tls.RecordHeaderError
		if errors.As(err, &notTLS) || ctx.Err() != nil {
			return nil, fmt.Errorf("TLS handshake with %s got no TLS answer (%w): a rediss:// address or "+
				"Options.Redis.TLSConfig asks for TLS; if the server listens in plain TCP there, use redis:// "+
				"(and no TLSConfig)", dst, err)
		}
		return nil, fmt.Errorf("TLS handshake with %s: %w", dst, err)
	}
	return conn, nil
}
