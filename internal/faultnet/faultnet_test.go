package faultnet

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"
)

// echo starts a server that echoes lines.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader) (time.Duration, error) {
	start := time.Now()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	line, err := r.ReadString('\n')
	if err == nil && line != "ping\n" {
		t.Fatalf("got %q", line)
	}
	return time.Since(start), err
}

func TestLatencyStallCutPartition(t *testing.T) {
	p, err := Start(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if d, err := roundTrip(t, c, r); err != nil || d > 100*time.Millisecond {
		t.Fatalf("plain round trip: %v, %v", d, err)
	}
	p.SetLatency(100 * time.Millisecond)
	if d, err := roundTrip(t, c, r); err != nil || d < 200*time.Millisecond || d > 500*time.Millisecond {
		t.Fatalf("round trip with 100 ms each way: %v, %v", d, err)
	}
	p.SetLatency(0)
	p.Stall(Downstream, true)
	go func() {
		time.Sleep(300 * time.Millisecond)
		p.Stall(Downstream, false)
	}()
	if d, err := roundTrip(t, c, r); err != nil || d < 250*time.Millisecond {
		t.Fatalf("round trip through a 300 ms stall: %v, %v", d, err)
	}
	p.Cut()
	if _, err := roundTrip(t, c, r); err == nil {
		t.Fatal("a cut connection still works")
	}
	p.Partition(true)
	if c2, err := net.Dial("tcp", p.Addr); err == nil {
		if _, err := roundTrip(t, c2, bufio.NewReader(c2)); err == nil {
			t.Fatal("a partitioned proxy forwards")
		}
		c2.Close()
	}
	p.Partition(false)
	c3, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if _, err := roundTrip(t, c3, bufio.NewReader(c3)); err != nil {
		t.Fatalf("after the partition healed: %v", err)
	}
}

func TestCutWhileStalled(t *testing.T) {
	p, err := Start(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p.Stall(Upstream, true)
	c.Write([]byte("held\n"))
	time.Sleep(50 * time.Millisecond)
	p.Cut()
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Close hangs on a stalled, cut link")
	}
}

// TestDownRefusesDials: after Down a dial is refused by the system (an *net.OpError of Op "dial"), not
// accepted and closed; after Up, on the same address, connections work again.
func TestDownRefusesDials(t *testing.T) {
	p, err := Start(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := p.Down(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := bufio.NewReader(c).ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("a connection made before Down still reads")
	}
	if c2, err := net.Dial("tcp", p.Addr); err == nil {
		c2.Close()
		t.Fatal("a dial after Down was accepted")
	} else if op, ok := err.(*net.OpError); !ok || op.Op != "dial" {
		t.Fatalf("a dial after Down failed with %T %v, want a dial *net.OpError", err, err)
	}
	if err := p.Up(); err != nil {
		t.Fatal(err)
	}
	c3, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if _, err := roundTrip(t, c3, bufio.NewReader(c3)); err != nil {
		t.Fatalf("after Up: %v", err)
	}
}

// TestJitterKeepsOrder: with jitter, each read is delayed by latency plus a random part, and a
// connection's bytes still arrive in the order they were sent.
func TestJitterKeepsOrder(t *testing.T) {
	p, err := Start(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.SetLatency(time.Millisecond)
	p.SetJitter(3 * time.Millisecond)
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	for i := range 50 {
		fmt.Fprintf(c, "%d\n", i)
		time.Sleep(100 * time.Microsecond)
	}
	for i := range 50 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%d\n", i); line != want {
			t.Fatalf("line %d is %q: reordered", i, line)
		}
	}
}

// TestReplyLagSparesSubscribers: with a reply lag, what the server sends back is late on a connection that
// did not subscribe, and on time on one that sent a SUBSCRIBE (in RESP, in any case).
func TestReplyLagSparesSubscribers(t *testing.T) {
	p, err := Start(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const lag = 200 * time.Millisecond
	p.SetReplyLag(lag)
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	cmd, cmdR := dial()
	sub, subR := dial()
	if _, err := sub.Write([]byte("*2\r\n$9\r\nsubscribe\r\n$1\r\nx\r\n")); err != nil {
		t.Fatal(err)
	}
	for range 5 { // the echoed command, a line each
		sub.SetReadDeadline(time.Now().Add(3 * time.Second))
		if _, err := subR.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if d, err := roundTrip(t, cmd, cmdR); err != nil || d < lag {
		t.Fatalf("a reply on a connection that did not subscribe came after %v (%v), want at least %v", d, err, lag)
	}
	if d, err := roundTrip(t, sub, subR); err != nil || d >= lag {
		t.Fatalf("a message on a subscribed connection came after %v (%v), want less than %v", d, err, lag)
	}
	p.SetReplyLag(0)
	if d, err := roundTrip(t, cmd, cmdR); err != nil || d >= lag {
		t.Fatalf("without the lag, a reply came after %v (%v), want less than %v", d, err, lag)
	}
}
