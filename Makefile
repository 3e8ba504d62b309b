# Peer benchmarks: a separate module (bench/), so that the library's go.mod never depends on the peers.
.PHONY: bench bench-full test
bench:
	cd bench && go run . -quick
bench-full:
	cd bench && go run .
test:
	go test -race -count=1 -timeout 30m ./... ./cmd/relock/...
