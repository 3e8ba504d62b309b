// Package redisaddr reads the Redis addresses relock's New and the relock command take: host:port (a
// server, or the seed nodes of a cluster), or one redis:// or rediss:// URL.
package redisaddr

import (
	"fmt"
	"net"
	"strings"

	"github.com/redis/rueidis"
)

// Parse returns the rueidis configuration of addrs: each a host:port, or a single redis:// or rediss://
// URL (read by rueidis.ParseURL, which also takes valkey://, valkeys:// and unix://: user, password,
// database, TLS, dial_timeout...). An error says which address is wrong and why, without a URL's
// password; addrs must not be empty.
func Parse(addrs []string) (rueidis.ClientOption, error) {
	var o rueidis.ClientOption
	if len(addrs) == 0 {
		return o, fmt.Errorf("no Redis address")
	}
	for _, a := range addrs {
		a = strings.TrimSpace(a)
		if strings.Contains(a, "://") {
			if len(addrs) > 1 {
				return o, fmt.Errorf("address %q: a URL must be the only address", redact(a))
			}
			u, err := rueidis.ParseURL(a)
			if err != nil {
				return o, fmt.Errorf("address %q: %v", redact(a), err)
			}
			return u, nil
		}
		_, port, err := net.SplitHostPort(a)
		if err == nil && port == "" {
			err = fmt.Errorf("missing port")
		}
		if err != nil {
			return o, fmt.Errorf("address %q: want host:port or a redis:// or rediss:// URL: %v", a, err)
		}
		o.InitAddress = append(o.InitAddress, a)
	}
	return o, nil
}

// redact returns a URL with its password, if any, replaced by "xxxxx".
func redact(a string) string {
	scheme, rest, _ := strings.Cut(a, "://")
	userinfo, hostpath, ok := strings.Cut(rest, "@")
	if !ok {
		return a
	}
	if user, _, hasPass := strings.Cut(userinfo, ":"); hasPass {
		return scheme + "://" + user + ":xxxxx@" + hostpath
	}
	return a
}
