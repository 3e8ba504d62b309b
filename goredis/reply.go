package relockgoredis

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"strconv"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// result makes the reply of a go-redis command a rueidis one: an error reply stays Redis's (relock reads
// its message), a nil reply is RESP's null, and any other failure (the connection, the pool, a closed
// client) is the call's error.
func result(c *redis.Cmd) rueidis.RedisResult {
	if err := c.Err(); err != nil {
		return errorResult(err)
	}
	return message(c.Val())
}

func errorResult(err error) rueidis.RedisResult {
	var rerr redis.Error
	switch {
	case errors.Is(err, redis.Nil):
		return message(nil)
	case errors.Is(err, redis.ErrClosed):
		return rueidis.NewErrorResult(rueidis.ErrClosing)
	case errors.As(err, &rerr):
		return message(replyError(rerr.Error()))
	}
	return rueidis.NewErrorResult(err)
}

// replyError is an error reply inside a reply (an array's element), or the reply itself.
type replyError string

// message makes v, a reply as go-redis reads it (RESP2 or RESP3), a rueidis message. rueidis builds its
// messages internally; it reads them from the form it stores cached replies in (RedisMessage.CacheMarshal:
// seven bytes of cache time, then per value its type, eight bytes of length or integer, and its bytes or
// elements), which is what message writes.
func message(v any) rueidis.RedisResult {
	buf := appendValue(make([]byte, 7, 64), v)
	var m rueidis.RedisMessage
	if err := m.CacheUnmarshalView(buf); err != nil {
		return rueidis.NewErrorResult(fmt.Errorf("relockgoredis: a reply rueidis cannot read (%T): %w", v, err))
	}
	return rueidis.NewResult(m, nil)
}

func appendValue(buf []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return appendHead(buf, '_', 0)
	case int64:
		return appendHead(buf, ':', uint64(v))
	case bool:
		if v {
			return appendHead(buf, '#', 1)
		}
		return appendHead(buf, '#', 0)
	case string:
		return append(appendHead(buf, '$', uint64(len(v))), v...)
	case replyError:
		return append(appendHead(buf, '-', uint64(len(v))), v...)
	case redis.Error:
		return appendValue(buf, replyError(v.Error()))
	case float64:
		s := strconv.FormatFloat(v, 'f', -1, 64)
		return append(appendHead(buf, ',', uint64(len(s))), s...)
	case *big.Int:
		s := v.String()
		return append(appendHead(buf, '(', uint64(len(s))), s...)
	case []any:
		buf = appendHead(buf, '*', uint64(len(v)))
		for _, e := range v {
			buf = appendValue(buf, e)
		}
		return buf
	case []string:
		buf = appendHead(buf, '*', uint64(len(v)))
		for _, e := range v {
			buf = appendValue(buf, e)
		}
		return buf
	case map[any]any:
		buf = appendHead(buf, '%', uint64(2*len(v)))
		for k, e := range v {
			buf = appendValue(appendValue(buf, k), e)
		}
		return buf
	default:
		return appendValue(buf, replyError(fmt.Sprintf("ERR relockgoredis: a reply of type %T", v)))
	}
}

func appendHead(buf []byte, typ byte, n uint64) []byte {
	return binary.BigEndian.AppendUint64(append(buf, typ), n)
}
