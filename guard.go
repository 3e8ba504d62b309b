package relock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/rueidis"
)

// Writes guarded by a hold: Redis writes that land only while the caller still holds the lock (GuardedWrite,
// GuardedEval), and writes to a resource elsewhere that a later holder's token fences off (FencedWrite).

// ErrStaleToken is FencedWrite's error when a holder with a higher fencing token has written to the
// resource already: the caller's hold is over, whether or not it knows yet. Nothing was written.
var ErrStaleToken = errors.New("relock: a later holder has written to the resource (stale fencing token)")

// GuardedWrite runs cmds in Redis, in order, in one script run, only if the hold of ctx's owner on the lock
// is still current: its owner field is in the lock and, for a fenced lock (WithFencing), no first
// acquisition has come since the one that began the hold (the fencing counter is still at its token;
// without fencing, a hold its owner lost and took again passes). It returns the commands' replies, in
// order. When the hold is not current, it returns ErrNotHeld and runs none of them: a write can never land
// after another owner took the lock, even if this one was paused past its hold.
//
// Build the commands with Client.B (or any rueidis client's builder). They must touch only keys in the
// lock's hash slot: on a single server any key; on a cluster, keys that share the lock name's hash tag
// (name the lock "{order:42}" and its data "{order:42}:data"), which GuardedWrite checks, sending
// nothing otherwise (ErrCrossSlot), for commands built by Client.B or another cluster client's builder (a
// single-server builder's commands carry no slot: Redis then refuses a key of another slot when the
// script reaches it). A command that fails (a wrong type) ends the run with its
// error, after the commands before it ran: Redis does not roll back. Blocking commands and transactions
// are not allowed in scripts. With no commands, it only checks the hold (a round trip). The hold is not
// renewed or changed.
func (l *RLock) GuardedWrite(ctx context.Context, cmds ...rueidis.Completed) ([]rueidis.RedisMessage, error) {
	g, err := l.guard(ctx, "guardedwrite")
	if err != nil {
		return nil, err
	}
	args := []string{g.field, g.token}
	if args, err = packCommands(args, l.c.cluster, slot(l.name), cmds); err != nil {
		return nil, l.fail(ctx, "guardedwrite", err)
	}
	r := l.c.exec(ctx, command{script: scriptGuardedWrite, keys: g.keys, args: args})
	return l.guardReplies(ctx, "guardedwrite", g.field, r)
}

// GuardedEval runs script, a Lua script of the caller's, with keys and args as its KEYS and ARGV, only if
// the hold of ctx's owner on the lock is current, as GuardedWrite tells, in the same script run: when the
// hold is not current, it returns ErrNotHeld and none of script runs. It returns script's reply. keys must
// be in the lock's hash slot, as GuardedWrite's. script is meant to be a constant: the Client keeps each
// distinct script it is given (with relock's opening) to run it by its SHA1.
func (l *RLock) GuardedEval(ctx context.Context, script string, keys, args []string) (rueidis.RedisMessage, error) {
	g, err := l.guard(ctx, "guardedeval")
	if err != nil {
		return rueidis.RedisMessage{}, err
	}
	if l.c.cluster {
		for _, k := range keys {
			if slot(k) != slot(l.name) {
				return rueidis.RedisMessage{}, l.fail(ctx, "guardedeval", errorf("%w: key %q is not in the lock's hash slot", ErrCrossSlot, k))
			}
		}
	}
	s := l.c.guardedScript(script)
	r := l.c.exec(ctx, command{script: s, keys: append(g.keys, keys...), args: append([]string{g.field, g.token}, args...)})
	return l.guardReply(ctx, "guardedeval", g.field, r)
}

// FencedWrite runs cmds in Redis only if no holder with a higher fencing token than the current hold's has
// written to the resource: fence is a key that keeps the highest token that wrote through it, checked and
// advanced in the same script run as cmds. It is for data outside the lock's hash slot (on a cluster,
// another node), where a hold cannot be checked atomically with the write: the resource itself rejects a
// stale holder, as fencing means (see WithFencing). cmds and fence must share a hash slot (on a cluster,
// name the fence after the data: "{order:42}:fence" for "{order:42}:data"). The lock must be fenced, and
// the hold acquired through a fenced lock (ErrNotFenced otherwise, with nothing sent: a hold taken
// without WithFencing has no token), and every writer of the resource must write through the fence.
//
// It returns the commands' replies; ErrStaleToken, with nothing written, when a higher token wrote through
// the fence already; ErrNotHeld, without a round trip, when the owner does not hold the lock as far as the
// Client knows. The fence never expires (as the lock's counter), and a write with the same token as the
// highest is allowed, so one holder may write many times. Failed commands end the run as in GuardedWrite.
func (l *RLock) FencedWrite(ctx context.Context, fence string, cmds ...rueidis.Completed) ([]rueidis.RedisMessage, error) {
	g, err := l.guard(ctx, "fencedwrite")
	if err != nil {
		return nil, err
	}
	if !l.fenced {
		return nil, l.fail(ctx, "fencedwrite", ErrNotFenced)
	}
	if g.token == "0" { // taken through an unfenced lock of the name: a token of 0 would fence nothing
		return nil, l.fail(ctx, "fencedwrite", errorf("%w: the hold was acquired without WithFencing, and has no token", ErrNotFenced))
	}
	if fence == "" {
		return nil, l.fail(ctx, "fencedwrite", errorf("%w: the fence key is empty", ErrInvalidName))
	}
	args := []string{g.token}
	if args, err = packCommands(args, l.c.cluster, slot(fence), cmds); err != nil {
		return nil, l.fail(ctx, "fencedwrite", err)
	}
	r := l.c.exec(ctx, command{script: scriptFencedWrite, keys: []string{fence}, args: args})
	return l.guardReplies(ctx, "fencedwrite", g.field, r)
}

// B returns a builder of Redis commands for GuardedWrite and FencedWrite: the builder of the Client's
// rueidis client, which on a cluster gives each command its slot, so that a guarded write is checked
// for its slot before it is sent. c must be a Client that New or Wrap returned.
func (c *Client) B() rueidis.Builder {
	return c.rdb.B()
}

// ErrCrossSlot is the error of a guarded or fenced write whose commands or keys are not all in the hash
// slot of the key that guards them (on a cluster). Nothing was sent.
var ErrCrossSlot = errors.New("relock: the write's keys are not in the guard's hash slot")

// guardArgs is what a guarded write sends of the hold: the lock's keys, the owner field and the token.
type guardArgs struct {
	keys         []string
	field, token string
}

// guard returns the hold of ctx's owner as a guarded write sends it, or ErrNotHeld, without a round trip,
// when the Client knows the owner holds nothing.
func (l *RLock) guard(ctx context.Context, op string) (guardArgs, error) {
	field, err := l.prepareField(ctx)
	if err != nil {
		return guardArgs{}, l.fail(ctx, op, err)
	}
	k := holdKey{key: l.name, field: field}
	token, held := l.c.holds.token(k)
	if !held {
		return guardArgs{}, l.fail(ctx, op, l.notHeld(field))
	}
	g := guardArgs{keys: []string{l.name, l.name}, field: field, token: "0"}
	if l.fenced && token != 0 {
		g.keys[1] = companion("redisson_lock_token", l.name)
		g.token = strconv.FormatUint(token, 10)
	}
	return g, nil
}

// guardReply turns a guarded script's reply into its own reply, or the refusal's error.
func (l *RLock) guardReply(ctx context.Context, op, field string, r rueidis.RedisResult) (rueidis.RedisMessage, error) {
	if rerr, ok := rueidis.IsRedisErr(r.Error()); ok && strings.HasPrefix(rerr.Error(), guardRefusal) {
		switch msg := strings.TrimPrefix(rerr.Error(), guardRefusal); {
		case strings.HasPrefix(msg, "NOTHELD"):
			return rueidis.RedisMessage{}, l.fail(ctx, op, l.notHeld(field))
		case strings.HasPrefix(msg, "STALE"):
			return rueidis.RedisMessage{}, l.fail(ctx, op, errorf("%w: %s", ErrStaleToken, strings.TrimPrefix(msg, "STALE ")))
		}
	}
	msg, err := r.ToMessage()
	if err != nil {
		return rueidis.RedisMessage{}, l.fail(ctx, op, err)
	}
	return msg, nil
}

// guardReplies is guardReply for a script that replies with its commands' replies.
func (l *RLock) guardReplies(ctx context.Context, op, field string, r rueidis.RedisResult) ([]rueidis.RedisMessage, error) {
	msg, err := l.guardReply(ctx, op, field, r)
	if err != nil {
		return nil, err
	}
	msgs, err := msg.ToArray()
	if err != nil {
		return nil, l.fail(ctx, op, errUnexpectedReply)
	}
	return msgs, nil
}

// guardRefusal starts the error reply of a guarded script that refused to write (lua/lib/guard.lua).
const guardRefusal = "RELOCKGUARD "

// packCommands appends cmds to args as lua/lib/guard.lua's run_commands reads them. On a cluster, a
// command built by a cluster client's builder must be in slot want.
func packCommands(args []string, cluster bool, want uint16, cmds []rueidis.Completed) ([]string, error) {
	args = append(args, strconv.Itoa(len(cmds)))
	for i := range cmds {
		cmd := &cmds[i]
		if cmd.IsEmpty() {
			return nil, errorf("%w: command %d is empty", ErrInvalidOptions, i)
		}
		if s := cmd.Slot(); cluster && s < 1<<14 && s != want {
			return nil, errorf("%w: command %d (%s) is in slot %d, the guard in %d", ErrCrossSlot, i, cmd.Commands()[0], s, want)
		}
		words := cmd.Commands()
		args = append(append(args, strconv.Itoa(len(words))), words...)
	}
	return args, nil
}

// guardedScripts keeps the scripts GuardedEval made, by the user's script.
type guardedScripts struct {
	m sync.Map // string -> *script
}

// guardedScript returns the script that runs user after relock's guard (lua/guarded_eval.lua).
func (c *Client) guardedScript(user string) *script {
	if s, ok := c.guarded.m.Load(user); ok {
		return s.(*script)
	}
	s, _ := c.guarded.m.LoadOrStore(user, newScript("guarded_eval", scriptGuardedEval.src+"\n"+user))
	return s.(*script)
}
