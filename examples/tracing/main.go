// Command tracing shows the OpenTelemetry spans relock records for one lock: the acquisition (with the
// time it waited and its attempts), the hold (with its renewals) and the release, printed as JSON by the
// stdout exporter.
//
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/tracing
package main

import (
	"context"
	"log"
	"os"
	"time"

	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/relock-go/relock"
)

func main() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	exporter, err := stdouttrace.New(stdouttrace.WithPrettyPrint())
	if err != nil {
		log.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	defer tp.Shutdown(context.Background())

	// A short watchdog timeout, so the hold below is renewed a few times.
	c, err := relock.New([]string{addr}, &relock.Options{TracerProvider: tp, WatchdogTimeout: 600 * time.Millisecond})
	if err != nil {
		log.Fatalf("connecting to %s: %v", addr, err)
	}
	defer c.Close()

	ctx, span := tp.Tracer("example").Start(context.Background(), "nightly-report")
	defer span.End()
	err = relock.Do(ctx, c.Lock("relock:example:tracing"), func(ctx context.Context) error {
		time.Sleep(time.Second) // the work, while the watchdog renews the hold
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}
