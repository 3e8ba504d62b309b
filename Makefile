# Peer benchmarks: a separate module (bench/), so that the library's go.mod never depends on the peers.
.PHONY: bench bench-full test
bench:
	cd bench && go run . -quick
bench-full:
	cd bench && go run .
# The README's test command (the line after "<!-- test-command -->"), read by the script .ci/run reads it with.
test:
	@cmd=$$(.ci/test-command) && echo "+ $$cmd" && eval "$$cmd"
