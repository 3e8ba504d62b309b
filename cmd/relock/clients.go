package main

import (
	"context"
	"slices"
	"strings"

	"github.com/redis/rueidis"
	"github.com/relock-go/relock"
)

// clientConns finds the connections of relock Clients: relock.New names them ClientNamePrefix + the
// Client's ID. It returns the addresses (host:port, as Redis sees them) of each ID's connections, on every
// node. known is false when CLIENT LIST failed (an ACL may forbid it): then nothing can be said.
func clientConns(ctx context.Context, rdb rueidis.Client) (conns map[string][]string, known bool) {
	conns = map[string][]string{}
	for _, node := range rdb.Nodes() {
		list, err := node.Do(ctx, node.B().ClientList().Build()).ToString()
		if err != nil {
			return nil, false
		}
		for _, line := range strings.Split(list, "\n") {
			var addr, name string
			for _, f := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(f, "addr="); ok {
					addr = v
				} else if v, ok := strings.CutPrefix(f, "name="); ok {
					name = v
				}
			}
			if id, ok := strings.CutPrefix(name, relock.ClientNamePrefix); ok && addr != "" && !slices.Contains(conns[id], addr) {
				conns[id] = append(conns[id], addr)
			}
		}
	}
	for _, addrs := range conns {
		slices.Sort(addrs)
	}
	return conns, true
}

// hosts returns the distinct hosts of addrs (host:port), in order.
func hosts(addrs []string) []string {
	var out []string
	for _, a := range addrs {
		h := a
		if i := strings.LastIndexByte(a, ':'); i >= 0 {
			h = a[:i]
		}
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}
