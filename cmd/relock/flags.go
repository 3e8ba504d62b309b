package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"
	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redisaddr"
)

// defaultRedis is the address used when neither --redis nor $RELOCK_REDIS gives one.
const defaultRedis = "127.0.0.1:6379"

// common holds the flags every command takes.
type common struct {
	redis   string
	json    bool
	timeout time.Duration
	sharded string // --sharded-pubsub
}

// register adds the common flags to fs. timeout is the command's default for --timeout.
func (c *common) register(fs *flag.FlagSet, timeout time.Duration) {
	def := os.Getenv("RELOCK_REDIS")
	if def == "" {
		def = defaultRedis
	}
	fs.StringVar(&c.redis, "redis", def, "Redis `address`: host:port, comma-separated cluster seed nodes, or a redis:// URL")
	fs.BoolVar(&c.json, "json", false, "print JSON, for scripts")
	c.timeout = timeout
	fs.Var(positiveDuration{&c.timeout}, "timeout", "give up on Redis after this `duration` (above zero)")
	fs.StringVar(&c.sharded, "sharded-pubsub", "auto", "on a cluster, announce releases with sharded pub/sub: `auto`, on or off (set it as Redisson's shardedSubscriptionMode)")
}

// shardedPubSub returns the relock option --sharded-pubsub names.
func (c *common) shardedPubSub() (relock.ShardedPubSub, error) {
	switch strings.ToLower(c.sharded) {
	case "", "auto":
		return relock.ShardedPubSubAuto, nil
	case "on":
		return relock.ShardedPubSubOn, nil
	case "off":
		return relock.ShardedPubSubOff, nil
	}
	return 0, fmt.Errorf("%w: --sharded-pubsub %q: want auto, on or off", errUsage, c.sharded)
}

// positiveDuration is the flag.Value of a duration that must be above zero (--timeout).
type positiveDuration struct{ d *time.Duration }

func (p positiveDuration) String() string {
	if p.d == nil {
		return "0s"
	}
	return p.d.String()
}

func (p positiveDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return errors.New("not a duration (such as 5s or 500ms)")
	case d <= 0:
		return errors.New("must be above zero (such as 5s or 500ms)")
	}
	*p.d = d
	return nil
}

// newFlags returns a flag set for command name whose usage prints synopsis and the flags. With --json (see
// jsonRequested), what the flag package prints of a bad flag (its message, then the usage) is held back,
// for the error is printed as JSON (see run); the usage -h asks for is printed (see parse).
func newFlags(name, synopsis string, e env) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	if e.json {
		fs.SetOutput(&heldOutput{w: e.stderr})
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: relock %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// heldOutput is a flag set's output held back until flush.
type heldOutput struct {
	w    io.Writer
	held strings.Builder
}

func (h *heldOutput) Write(p []byte) (int, error) { return h.held.Write(p) }

func (h *heldOutput) flush() { io.WriteString(h.w, h.held.String()) }

// jsonRequested reports whether the command line args (after the command's name) ask for --json: the last
// of "-json", "--json" and "--json=BOOL" before "--" says, as for the flag package.
func jsonRequested(args []string) bool {
	on := false
	for _, a := range args {
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "json" {
			continue
		}
		on = true
		if hasValue {
			if b, err := strconv.ParseBool(value); err == nil {
				on = b
			}
		}
	}
	return on
}

// parse parses args with fs, allowing flags after positional arguments ("inspect NAME --json"), and
// returns the positional arguments. "--" ends the flags. A bad flag is a usage error.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				if h, ok := fs.Output().(*heldOutput); ok {
					h.flush()
				}
				return nil, err
			}
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > 0 && len(rest) < len(args) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parseName parses args with fs (see parse) and returns the one lock name they must hold.
func parseName(fs *flag.FlagSet, args []string) (string, error) {
	pos, err := parse(fs, args)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		return "", fmt.Errorf("%w: want one lock name, got %d arguments", errUsage, len(pos))
	}
	return pos[0], nil
}

// redisOption turns --redis into a rueidis configuration: comma-separated host:port addresses, or a URL,
// read as relock.New reads its addresses.
func (c *common) redisOption() (rueidis.ClientOption, error) {
	addr := strings.TrimSpace(c.redis)
	if addr == "" {
		return rueidis.ClientOption{}, fmt.Errorf("%w: --redis is empty", errUsage)
	}
	addrs := []string{addr}
	if !strings.Contains(addr, "://") {
		addrs = strings.Split(addr, ",")
	}
	o, err := redisaddr.Parse(addrs)
	if err != nil {
		return o, fmt.Errorf("%w: --redis: %v", errUsage, err)
	}
	return o, nil
}

// clientOption is redisOption with the command's timeouts: --timeout bounds each dial and each write.
func (c *common) clientOption() (rueidis.ClientOption, error) {
	o, err := c.redisOption()
	if err != nil {
		return o, err
	}
	o.DisableCache = true
	o.Dialer.Timeout = c.timeout
	o.ConnWriteTimeout = c.timeout
	if o.Dialer.Timeout <= 0 {
		o.Dialer.Timeout = 5 * time.Second
	}
	if o.ConnWriteTimeout <= 0 {
		o.ConnWriteTimeout = 5 * time.Second
	}
	return o, nil
}

// connect opens a rueidis client to --redis and wraps it in a relock Client. The caller must call the
// returned close function. A server that cannot be reached is reported in one line, within --timeout.
func (c *common) connect(ctx context.Context, opts *relock.Options) (*relock.Client, rueidis.Client, func(), error) {
	return c.connectWith(ctx, opts, nil)
}

// connectWith is connect, with the rueidis client passed through wrap (when not nil) before the relock
// Client is made on it; the rueidis client returned is what wrap returned.
func (c *common) connectWith(ctx context.Context, opts *relock.Options, wrap func(rueidis.Client) rueidis.Client) (*relock.Client, rueidis.Client, func(), error) {
	o, err := c.clientOption()
	if err != nil {
		return nil, nil, nil, err
	}
	mode, err := c.shardedPubSub()
	if err != nil {
		return nil, nil, nil, err
	}
	rdb, err := rueidis.NewClient(o)
	if err != nil {
		return nil, nil, nil, redisError(c.redis, err)
	}
	var lo relock.Options
	if opts != nil {
		lo = *opts
	}
	lo.ShardedPubSub = mode
	use := rdb
	if wrap != nil {
		use = wrap(rdb)
	}
	lc, err := relock.Wrap(use, &lo)
	if err != nil {
		rdb.Close()
		return nil, nil, nil, err
	}
	return lc, use, func() { lc.Close(); rdb.Close() }, nil
}

// open bounds ctx by --timeout and connects (see connect); done cancels the one and closes the other.
func (c *common) open(ctx context.Context) (_ context.Context, _ *relock.Client, _ rueidis.Client, done func(), _ error) {
	ctx, cancel := c.withTimeout(ctx)
	lc, rdb, closeAll, err := c.connect(ctx, nil)
	if err != nil {
		cancel()
		return nil, nil, nil, nil, err
	}
	return ctx, lc, rdb, func() { closeAll(); cancel() }, nil
}

// withTimeout bounds ctx by --timeout (when positive).
func (c *common) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.timeout)
}

// ctxOver reports whether ctx has ended, or its deadline has passed: rueidis fails a call with
// context.DeadlineExceeded as soon as the deadline passes, a moment before ctx.Err says so.
func ctxOver(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// redisError turns an error talking to Redis at addr into one line an operator can act on. A URL's
// password is never shown.
func redisError(addr string, err error) error {
	addr = redactURL(addr)
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return withKind(errKindUnavailable, fmt.Errorf("cannot connect to Redis at %s: connection refused (is redis-server running there? see --redis)", addr))
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return withKind(errKindUnavailable, fmt.Errorf("Redis at %s did not answer in time: %v", addr, err))
	case errors.Is(err, io.EOF):
		return withKind(errKindUnavailable, fmt.Errorf("Redis at %s closed the connection: %v", addr, err))
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return withKind(errKindUnavailable, fmt.Errorf("cannot resolve the Redis address %s: %v", addr, err))
	}
	return fmt.Errorf("Redis at %s: %w", addr, err)
}

// redactURL returns addr with the password of a redis:// or rediss:// URL replaced by "xxxxx".
func redactURL(addr string) string {
	if !strings.Contains(addr, "://") {
		return addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return "(an unparsable URL)"
	}
	return u.Redacted()
}
