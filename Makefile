# Peer benchmarks: a separate module (bench/), so that the library's go.mod never depends on the peers.
.PHONY: bench bench-full test vet
bench:
	cd bench && go run . -quick
bench-full:
	cd bench && go run .
# The README's test command (the line after "<!-- test-command -->"), read by the script .ci/run reads it with.
test:
	@cmd=$$(.ci/test-command) && echo "+ $$cmd" && eval "$$cmd"
# go vet in every module of go.work (the library, cmd/relock, examples, bench, relocktest, safety): at the
# root, go vet ./... stops at each nested module's go.mod. .ci/run does the same.
vet:
	@for dir in $$(go list -m -f '{{.Dir}}'); do echo "+ go vet ./... (in .$${dir#"$$PWD"})"; (cd "$$dir" && go vet ./...) || exit 1; done
