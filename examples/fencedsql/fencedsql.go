// Package fencedsql fences writes to PostgreSQL with a relock fencing token, so that a lock holder that
// was paused past its hold cannot overwrite, or build on a stale read of, the work of the holder after it.
//
// # The problem
//
// A lock in Redis cannot stop a holder that does not know it lost the lock: a process paused by a garbage
// collection, a stalled VM or a SIGSTOP longer than its lease (or whose lock an operator forced open) wakes
// up believing it still holds the lock, and writes. By then another holder has the lock and may have
// written too. Only the store being written can refuse the late write, and it needs something to tell the
// two holders apart: the fencing token. A lock made with relock.WithFencing gives each new holder a token
// greater than every earlier holder's (RLock.FencingToken), and the holder passes it with every operation.
//
// # The rule the store keeps
//
// Each row keeps, in a fence column, the highest token that has claimed it. Every operation on the row, a
// read for a later write as well as a write, claims the row first, in the same statement:
//
//	UPDATE t SET fence = $token WHERE id = $id AND fence <= $token RETURNING value   -- read
//	UPDATE t SET value = $value, fence = $token WHERE id = $id AND fence <= $token   -- write
//
// An operation that matches no row (the row exists: its fence is higher than the token) is refused with
// ErrStaleToken. So once a holder has claimed a row, every operation with an older token is refused, for
// good.
//
// The read claims the row too because a read-modify-write is only as good as its read. Were only writes
// fenced, an old holder A (token 1) and the new holder B (token 2) could both read the value 10; A, paused
// past its hold, writes 11 (the fence is still 1: accepted), then B writes its 10+1 (accepted: 2 > 1) and
// A's update is lost without anyone being told. With the read fenced, B's read moves the fence to 2, and
// A's write is refused.
//
// The comparison is <=, not <: a holder keeps one token for its whole hold (a reentrant acquisition keeps
// it too), and it reads, then writes, and may write several times. Each of its operations must pass the
// claim its own earlier ones made. Equal tokens mean the same hold, because the lock never gives one token
// to two holders; with < a holder could not write after its own read.
//
// # Correctness does not depend on the lock
//
// Once every operation carries a token, the rule alone keeps the row right, whatever the lock does: even
// with two holders at once (a lease that ran out, ForceUnlock, a lock lost with Redis), the operations the
// store accepts on a row come in the order of their tokens, and between a holder's Read and its Write no
// other holder's operation is accepted, or the Write is refused. The worst a broken lock can cause is an
// ErrStaleToken, never a lost update. The lock is still worth having: it makes holders take turns, so that
// they do not waste their work on refusals.
//
// ErrStaleToken means that the hold is over, whether or not the holder has been told yet (its HoldContext
// ends soon after, with relock.ErrLockLost). Do not retry with the same token: acquire the lock again,
// which gives a new token, and read again.
//
// # Two ways to read-modify-write
//
// Update does the whole read-modify-write in one transaction: the claiming read locks the row until the
// transaction ends, so nothing comes between the read and the write. Use it when the new value is
// computed quickly. Read and Write are the two halves, each its own transaction, for work between them
// that should not keep a transaction open (a call to another service): the claim that Read commits is
// what keeps older holders out until Write.
//
// # Limits
//
//   - One token, one writer at a time. Goroutines that share a hold (relock.WithOwner) share its token;
//     the store cannot tell them apart, so their Read-Write pairs must not overlap (Updates may: the row
//     lock orders them).
//   - Tokens must never go back. The counter lives in Redis next to the lock; a Redis that loses it (a
//     restart without persistence, a failover to a replica that missed it) starts tokens again, and the
//     store refuses the new holders (or, once they catch up, accepts an old holder still at work). See
//     docs/operations.md, "Fencing".
//   - Each row is fenced on its own. Work that spans several rows claims each of them, or fences one row
//     that stands for the whole resource, in the same transaction as its writes.
//
// Tables are made by Table.Create: id text primary key, value bigint, fence bigint (0 until a token
// claims the row). A table of your own needs only the fence column and the two statements above.
package fencedsql

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrStaleToken means that a newer holder has claimed the row: the row's fence is higher than the token
// the operation carried, and the operation changed nothing. Match it with errors.Is.
var ErrStaleToken = errors.New("fencedsql: stale fencing token: a newer holder has claimed the row")

// ErrNoRow means that the row does not exist (Table.Insert creates it).
var ErrNoRow = errors.New("fencedsql: no such row")

// ErrInvalidToken means that the token is 0, which no fenced lock gives (its tokens start at 1; 0 is what
// an unchecked FencingToken error leaves), or does not fit in a bigint.
var ErrInvalidToken = errors.New("fencedsql: invalid fencing token")

// DB is what Table needs of a connection: a *pgx.Conn, or a *pgxpool.Pool when goroutines share it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// querier is what both a DB and a transaction have.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Table is a table of fenced rows (id text, value bigint, fence bigint) in db. Its methods are safe for
// concurrent use when db is.
type Table struct {
	db    DB
	ident string // the quoted table name
}

// NewTable returns the table called name (quoted: it may hold any character; "schema.table" is one name,
// not a table in a schema) in db. It does not create it: see Create.
func NewTable(db DB, name string) *Table {
	return &Table{db: db, ident: pgx.Identifier{name}.Sanitize()}
}

// Create creates the table if it does not exist.
func (t *Table) Create(ctx context.Context) error {
	_, err := t.db.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+t.ident+` (
		id    text   PRIMARY KEY,
		value bigint NOT NULL,
		fence bigint NOT NULL DEFAULT 0
	)`)
	return err
}

// Insert creates the row id with value and fence 0, unless it exists: it never changes an existing row, so
// it needs no token.
func (t *Table) Insert(ctx context.Context, id string, value int64) error {
	_, err := t.db.Exec(ctx, `INSERT INTO `+t.ident+` (id, value, fence) VALUES ($1, $2, 0)
		ON CONFLICT (id) DO NOTHING`, id, value)
	return err
}

// Update reads row id, passes its value to fn and writes fn's result, all with token and in one
// transaction; it returns the value written. The read claims the row (its fence becomes token) and locks
// it until the write commits, so no other operation comes in between. It returns an error matching
// ErrStaleToken, having changed nothing, when a holder with a higher token has claimed the row; if fn
// returns an error, nothing is changed and Update returns it.
//
// The transaction is READ COMMITTED whatever the database's default: an Update that waits for another's
// row lock then checks the fence of the row that transaction committed, and is refused if it is higher.
func (t *Table) Update(ctx context.Context, id string, token uint64, fn func(value int64) (int64, error)) (int64, error) {
	fence, err := fenceOf(token)
	if err != nil {
		return 0, err
	}
	var value int64
	err = pgx.BeginTxFunc(ctx, t.db, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		old, err := t.read(ctx, tx, id, fence)
		if err != nil {
			return err
		}
		if value, err = fn(old); err != nil {
			return err
		}
		return t.write(ctx, tx, id, fence, value)
	})
	if err != nil {
		return 0, err
	}
	return value, nil
}

// Read claims row id for token and returns its value: from now on, until a holder with a higher token
// claims it, only token may write it. It returns an error matching ErrStaleToken when a holder with a
// higher token has claimed the row. Use it, then Write, when the work between the read and the write
// should not keep a transaction open; otherwise use Update.
func (t *Table) Read(ctx context.Context, id string, token uint64) (int64, error) {
	fence, err := fenceOf(token)
	if err != nil {
		return 0, err
	}
	return t.read(ctx, t.db, id, fence)
}

// Write sets row id's value with token. It returns an error matching ErrStaleToken, having changed
// nothing, when a holder with a higher token has claimed the row, by a read or a write, since this
// holder's Read (or at all: a Write without a Read claims the row too).
func (t *Table) Write(ctx context.Context, id string, token uint64, value int64) error {
	fence, err := fenceOf(token)
	if err != nil {
		return err
	}
	return t.write(ctx, t.db, id, fence, value)
}

// read is the claiming read: the fence moves up to token, or the row is left alone.
func (t *Table) read(ctx context.Context, q querier, id string, token int64) (int64, error) {
	var value int64
	err := q.QueryRow(ctx, `UPDATE `+t.ident+` SET fence = $2 WHERE id = $1 AND fence <= $2 RETURNING value`,
		id, token).Scan(&value)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, t.refused(ctx, q, id, token)
	}
	return value, err
}

// write is the fenced write.
func (t *Table) write(ctx context.Context, q querier, id string, token, value int64) error {
	tag, err := q.Exec(ctx, `UPDATE `+t.ident+` SET value = $3, fence = $2 WHERE id = $1 AND fence <= $2`,
		id, token, value)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return t.refused(ctx, q, id, token)
	}
	return nil
}

// refused says why a claim matched no row: the row is missing, or its fence is higher than token. It only
// explains; the claim's statement has already refused the operation.
func (t *Table) refused(ctx context.Context, q querier, id string, token int64) error {
	var fence int64
	err := q.QueryRow(ctx, `SELECT fence FROM `+t.ident+` WHERE id = $1`, id).Scan(&fence)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %q in %s", ErrNoRow, id, t.ident)
	case err != nil:
		return fmt.Errorf("fencedsql: row %q refused token %d (it is missing or a newer token claimed it; reading which: %w)",
			id, token, err)
	}
	return fmt.Errorf("%w: row %q, token %d, fence %d", ErrStaleToken, id, token, fence)
}

// fenceOf converts a token to the bigint the fence column keeps.
func fenceOf(token uint64) (int64, error) {
	if token == 0 || token > math.MaxInt64 {
		return 0, fmt.Errorf("%w: %d", ErrInvalidToken, token)
	}
	return int64(token), nil
}
