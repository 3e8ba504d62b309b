package relock_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// New names its connections after the Client (so that an operator can tell which process holds a lock),
// unless the application named them.
func TestNewNamesConnections(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 5*time.Second)

	c := newClient(t, srv, nil)
	if err := c.Lock("named").Lock(ctx); err != nil { // opens a connection
		t.Fatal(err)
	}
	named, err := relock.New([]string{srv.Addr()}, &relock.Options{Redis: rueidis.ClientOption{ClientName: "billing-7"}})
	if err != nil {
		t.Fatal(err)
	}
	defer named.Close()
	if _, err := named.Lock("other").TryLock(ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	list, err := do(t, rdb, "CLIENT", "LIST").ToString()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"name=" + relock.ClientNamePrefix + c.ID() + " ", "name=billing-7 "} {
		if !strings.Contains(list, want) {
			t.Errorf("CLIENT LIST lacks %q:\n%s", want, list)
		}
	}
	if strings.Contains(list, named.ID()) {
		t.Errorf("a Client whose connections the application named was renamed:\n%s", list)
	}
}
