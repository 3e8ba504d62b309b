// Package faultnet is a TCP proxy for fault tests on loopback: it forwards every connection it accepts to
// a target, and on command adds latency, stalls a direction, cuts every connection, or refuses new ones.
//
// It never drops or reorders bytes inside a connection: a Redis client reading RESP would only see
// garbage then, which no real network produces. Faults are delays, stalls and whole-connection cuts.
package faultnet

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Proxy forwards connections from Addr to a target. Its methods are safe for concurrent use.
type Proxy struct {
	// Addr is the proxy's loopback address, to give clients instead of the target's.
	Addr string

	target string
	ln     net.Listener

	mu      sync.Mutex
	changed *sync.Cond // broadcast when latency, stalls or closing change
	latency time.Duration
	jitter  time.Duration
	lag     time.Duration // SetReplyLag's
	stalled [2]bool       // [upstream: client to server, downstream: server to client]
	refuse  bool
	down    bool // the listener is closed: dials are refused by the system (Down)
	closed  bool
	links   map[*link]struct{}
	wg      sync.WaitGroup
}

// Directions for Stall.
const (
	Upstream   = 0 // client to server
	Downstream = 1 // server to client
)

type link struct {
	client, server net.Conn
	dead           bool // guarded by Proxy.mu
	subscriber     bool // the client subscribed on it (see SetReplyLag); guarded by Proxy.mu
}

// Start listens on a free loopback port and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, links: make(map[*link]struct{})}
	p.changed = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept(ln)
	return p, nil
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed || p.refuse || p.down {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.mu.Unlock()
		s, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			c.Close()
			continue
		}
		l := &link{client: c, server: s}
		p.mu.Lock()
		if p.closed || p.down { // Down came while this connection was being made
			p.mu.Unlock()
			c.Close()
			s.Close()
			continue
		}
		p.links[l] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(l, Upstream, c, s)
		go p.pipe(l, Downstream, s, c)
	}
}

// chunk is data read at a time, to be written latency later.
type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst for one direction of l, delaying each read by the latency in force when it was
// read, holding data while the direction is stalled, and closing the link when either side ends.
func (p *Proxy) pipe(l *link, dir int, src, dst net.Conn) {
	defer p.wg.Done()
	queue := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() { // the writer: in order, each chunk at its due time, never while stalled
		defer close(done)
		for c := range queue {
			if d := time.Until(c.due); d > 0 {
				sleep(d)
			}
			p.mu.Lock()
			for p.stalled[dir] && !p.closed && !l.dead {
				p.changed.Wait()
			}
			p.mu.Unlock()
			if _, err := dst.Write(c.data); err != nil {
				p.drop(l)
				for range queue { // drain so the reader can finish
				}
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	var last time.Time // the last chunk's due time: jitter never reorders a direction's bytes
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			lat := p.latency
			if p.jitter > 0 {
				lat += rand.N(p.jitter)
			}
			if dir == Upstream && !l.subscriber && subscribes(buf[:n]) {
				l.subscriber = true
			}
			if dir == Downstream && !l.subscriber {
				lat += p.lag
			}
			p.mu.Unlock()
			due := time.Now().Add(lat)
			if due.Before(last) {
				due = last
			}
			last = due
			queue <- chunk{data: append([]byte(nil), buf[:n]...), due: due}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				p.drop(l)
			}
			break
		}
	}
	close(queue)
	<-done
	p.drop(l)
}

// drop closes both sides of l.
func (p *Proxy) drop(l *link) {
	p.mu.Lock()
	delete(p.links, l)
	l.dead = true
	p.changed.Broadcast()
	p.mu.Unlock()
	l.client.Close()
	l.server.Close()
}

// SetLatency delays everything read from now on by d, in both directions (0: none).
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// SetJitter adds to the latency of everything read from now on a random delay below d, drawn for each
// read (0: none). Within a connection and a direction bytes keep their order; across connections (a
// client's command and pub/sub connections, say) what was sent first may arrive second, as on a real
// network.
func (p *Proxy) SetJitter(d time.Duration) {
	p.mu.Lock()
	p.jitter = d
	p.mu.Unlock()
}

// SetReplyLag delays by d more what the server sends from now on over connections on which the client
// has not subscribed (0: none): replies lag, and the pub/sub messages of a subscribed connection overtake
// the replies to commands that ran before they were published, as when a client's command connection is
// slower than its pub/sub connection. A connection counts as subscribed once the client sent SUBSCRIBE,
// SSUBSCRIBE or PSUBSCRIBE on it.
func (p *Proxy) SetReplyLag(d time.Duration) {
	p.mu.Lock()
	p.lag = d
	p.mu.Unlock()
}

// subscribes reports whether data, sent by a client, holds a subscribing command's name (a bulk string of
// RESP, in any case).
func subscribes(data []byte) bool {
	return bytes.Contains(bytes.ToUpper(data), []byte("SUBSCRIBE\r\n"))
}

// Stall stops (stalled true) or restarts forwarding in direction dir. Stalled data is kept, not lost.
func (p *Proxy) Stall(dir int, stalled bool) {
	p.mu.Lock()
	p.stalled[dir] = stalled
	p.changed.Broadcast()
	p.mu.Unlock()
}

// Cut closes every connection through the proxy; clients see them reset and reconnect.
func (p *Proxy) Cut() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		p.drop(l)
	}
}

// Partition cuts every connection and refuses new ones (on true), or accepts them again (on false).
func (p *Proxy) Partition(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
	if on {
		p.Cut()
	}
}

// Down closes the proxy's listener and every connection through it: a client's dial is then refused by
// the system (ECONNREFUSED), as when the server is not running, and it knows nothing was sent. Partition,
// by contrast, accepts a connection and closes it at once, as a server that crashes at the handshake.
func (p *Proxy) Down() error {
	p.mu.Lock()
	if p.down || p.closed {
		p.mu.Unlock()
		return nil
	}
	p.down = true
	ln := p.ln
	p.mu.Unlock()
	err := ln.Close()
	p.Cut()
	return err
}

// Up listens on the proxy's address again after Down. It fails if another process took the port meanwhile.
func (p *Proxy) Up() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.down || p.closed {
		return nil
	}
	ln, err := net.Listen("tcp", p.Addr)
	if err != nil {
		return err
	}
	p.ln, p.down = ln, false
	p.wg.Add(1)
	go p.accept(ln)
	return nil
}

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.changed.Broadcast()
	ln, down := p.ln, p.down
	p.mu.Unlock()
	var err error
	if !down {
		err = ln.Close()
	}
	p.Cut()
	p.wg.Wait()
	return err
}
