# make test: everything CI runs. It installs redis-server with apt-get when
# it is missing, then checks formatting, vets, lints and runs every test
# with the race detector against real redis-server processes.

GO          ?= go
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
SUDO        := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: test deps fmt vet lint fuzz bench run

test: deps fmt vet lint
	$(GO) test -race -count=1 ./...
	$(MAKE) fuzz

# A short run of each fuzz target beyond its seed corpus (which go test
# runs anyway). Runs are counted in executions, not seconds: a time limit
# that expires mid-input makes go test report "context deadline exceeded"
# as a failure on a loaded machine.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 20000x ./config/
	$(GO) test -run '^$$' -fuzz '^FuzzClientIP$$' -fuzztime 100000x ./httplimit/
	$(GO) test -run '^$$' -fuzz '^FuzzBucketEqualsGCRA$$' -fuzztime 300000x ./internal/algo/

# Benchmarks of this module; peer comparisons live in bench/.
bench: deps
	$(GO) test -run '^$$' -bench . -benchmem ./...

run:
	$(GO) run ./examples/basic
