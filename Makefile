# make test: everything CI runs. It installs redis-server, redis-cli,
# nginx, chromium, firefox-esr and the rest with apt-get when they are
# missing (and tools/node's npm packages with npm ci), then checks
# formatting, vets, lints and runs every test with the race detector
# against real redis-server (and nginx, and headless Chromium and
# Firefox) processes: the end-to-end browser tests too (-tags e2e).

GO          ?= go
SUDO        := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# Where make keeps what it installs and builds for the tests, never in
# the repository.
SLUICE_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/sluice

# The stages of make test, each a target below, in four steps, one after
# another: no stage of a step starts before every stage of the step
# before it has ended. The first has three lanes side by side: apt-get
# (deps); the downloads of the modules and of the vulnerability database;
# the go installs of $(TOOLS), one after another (each go install uses
# every core already). None of them needs what another installs, so a
# cold run waits for the slowest lane, not for their sum. The static
# checks then run in two lanes (fmt then vet: vet alone compiles the code
# twice, for amd64 and 386; lint then vuln), the tests alone (nothing
# beside the timing-sensitive ones), then fuzz beside the two other
# modules' tests (benchcheck then examples), none of which times anything.
# GNU make orders them: make test makes stage/NAME for each stage with
# -j$(TEST_JOBS) (the widest step's lanes), and the order-only
# prerequisites below are the steps and lanes. stage/NAME makes NAME with a
# make of its own through scripts/stage.sh, which prefixes each line of its
# output with the stage's name, prints how long it took as it ends
# (<== vet: ok, 1m02s) and, at the end, a table of them all (start, time,
# processor time, result), also when one failed, naming it. A failed
# stage fails make test: make lets the stages running beside it end and
# starts no other.
TEST_STEP1 = deps modules vulndb $(TOOLS)
TEST_STEP2 := fmt vet lint vuln
TEST_STEP3 := gotest
TEST_STEP4 := fuzz benchcheck examples
TEST_STAGES = $(TEST_STEP1) $(TEST_STEP2) $(TEST_STEP3) $(TEST_STEP4)
TEST_JOBS  := 3

# The Go commands the stages run. staticcheck (make lint) and govulncheck
# (make vuln) are installed with go install, once, into a directory of
# their own named by their version. The tests' tools are tool directives
# of tools/go.mod, which the tests build themselves through
# internal/testing/testutil.Tool (go tool -n, cached by the go build
# cache), so no test reads a variable set here; their targets below only
# build them early, beside the other downloads of a cold run:
#  upstream: envoyproxy/ratelimit's service_cmd at the version the Envoy
#    drop-in is judged by, for envoy's TestAgainstUpstream.
#  toxiproxy: Shopify's toxiproxy server, for the network-fault tests.
#  helm: for deploy's chart tests. Helm 4: Helm 3's last feature release
#    was v3.22.0 and its security fixes end in February 2027; the chart
#    (apiVersion v2) uses nothing Helm 3 lacks. The slowest build of them.
# The packages of the workspace (go.work): the library (.), the service
# it serves (internal/service), the command, the deployment kit and the
# guides, each a module of its own so that a library user's go.sum holds
# only what the library needs. ./... alone names only the root module.
PKGS := ./... ./internal/service/... ./cmd/sluice/... ./deploy/... ./docs/...

# The test tiers (docs/contributing.md): no tag is the unit tier, which
# go test ./... runs with nothing but Go; integration starts redis-server,
# nginx, toxiproxy and the binary; e2e drives browsers, podman, Helm,
# systemd, Node and the shell guides. make test runs them all.
TAGS := integration,e2e

TOOLS := staticcheck govulncheck upstream toxiproxy helm

STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOVULNCHECK := golang.org/x/vuln/cmd/govulncheck@v1.9.0

# $(call tool,NAME,PACKAGE@VERSION): the path go install puts that
# command at, in $(SLUICE_CACHE)/NAME-VERSION.
tool = $(SLUICE_CACHE)/$(1)-$(lastword $(subst @, ,$(2)))/$(notdir $(firstword $(subst @, ,$(2))))
# $(call goinstall,BIN,PACKAGE@VERSION): a recipe that installs the
# command at BIN unless it is there, then prints BIN.
goinstall = @([ -x "$(1)" ] || GOBIN="$(dir $(1))" CGO_ENABLED=0 $(GO) install $(2)) && echo "$(1)"

# staticcheck and govulncheck read the code with the go/types of the Go
# release that built them, so their directories name that release too.
GO_RELEASE       = $(shell $(GO) env GOVERSION)
STATICCHECK_BIN  = $(call tool,staticcheck-$(GO_RELEASE),$(STATICCHECK))
GOVULNCHECK_BIN  = $(call tool,govulncheck-$(GO_RELEASE),$(GOVULNCHECK))


# The snapshot of the Go vulnerability database govulncheck reads: the
# module golang.org/x/vulndb from the module proxy (vuln.go.dev cannot
# be reached from here), built into VULNDB_DIR by internal/tools/vulndb.
# Bump VULNDB_VERSION to see newer reports (go list -m golang.org/x/vulndb@latest).
VULNDB_VERSION := v0.0.0-20261105234957-e22db6528018
VULNDB_DIR     ?= $(SLUICE_CACHE)/vulndb

.PHONY: test stages $(TEST_STAGES:%=stage/%) coldtest gotest modules deps fmt vet lint vuln vulndb fuzz bench benchcheck examples run soak stress image $(TOOLS)

test:
	@dir=$$(mktemp -d); trap 'rm -rf "$$dir"' EXIT; t0=$$(date +%s.%N); \
	$(MAKE) --no-print-directory -j$(TEST_JOBS) STAGE_DIR="$$dir" stages; rc=$$?; \
	sh scripts/stage.sh table "$$dir" $$t0 $(TEST_STAGES); exit $$rc

stages: $(TEST_STAGES:%=stage/%)

$(TEST_STAGES:%=stage/%): stage/%:
	@sh scripts/stage.sh run '$(STAGE_DIR)' '$(MAKE)' $*

# The steps: each stage of a step after every stage of the one before.
$(TEST_STEP2:%=stage/%): | $(TEST_STEP1:%=stage/%)
$(TEST_STEP3:%=stage/%): | $(TEST_STEP2:%=stage/%)
$(TEST_STEP4:%=stage/%): | $(TEST_STEP3:%=stage/%)
# The lanes: within a step, each of these after the one before it.
stage/vulndb:      | stage/modules
stage/govulncheck: | stage/staticcheck
stage/upstream:    | stage/govulncheck
stage/toxiproxy:   | stage/upstream
stage/helm:        | stage/toxiproxy
stage/vet:         | stage/fmt
stage/vuln:        | stage/lint
stage/examples:    | stage/benchcheck

# make coldtest: make test as on a fresh machine whose apt packages are
# installed, to measure it: with empty GOCACHE, GOMODCACHE and
# XDG_CACHE_HOME (so an empty $(SLUICE_CACHE) and staticcheck's cache) in
# a temporary directory, removed afterwards. The machine's own caches are
# neither read nor written; downloads come from the module proxy again.
coldtest:
	@cold=$$(mktemp -d); trap 'chmod -R u+w "$$cold"; rm -rf "$$cold"' EXIT; \
	echo "make test with empty caches in $$cold"; \
	GOCACHE="$$cold/go-build" GOMODCACHE="$$cold/mod" XDG_CACHE_HOME="$$cold/cache" \
		$(MAKE) --no-print-directory test SLUICE_CACHE="$$cold/cache/sluice" VULNDB_DIR="$$cold/cache/sluice/vulndb"

# make gotest: every test of ./... with the race detector, given the
# tools they run.
gotest: upstream toxiproxy helm
	$(GO) test -race -count=1 -tags $(TAGS) $(PKGS)

# make modules: download the modules of ., bench and examples/frameworks
# (three go mod download at once, 17 s cold here against 49 s one after
# another), so that the stages after it build without waiting on the
# network.
modules:
	@$(GO) mod download & a=$$!; \
	(cd bench && $(GO) mod download) & b=$$!; \
	(cd examples/frameworks && $(GO) mod download) & c=$$!; \
	wait $$a && wait $$b && wait $$c

# make benchcheck: bench/ is a module of its own, outside ./...: vet it
# and run its tests (the report, the section format, a short harness run
# against a real redis-server; about 10 s), so that make bench keeps
# working. It runs no benchmark.
benchcheck:
	cd bench && $(GO) vet ./... && $(GO) test -count=1 ./...

# make examples: examples/frameworks is a module of its own, outside ./...,
# so that chi, gin and echo never enter sluice's go.mod: vet it and run
# its tests (each framework's router over loopback against httplimit's
# answers, its main on the in-memory store and on a real redis-server;
# a few seconds).
examples:
	cd examples/frameworks && $(GO) vet ./... && $(GO) test -race -count=1 ./...

staticcheck:
	$(call goinstall,$(STATICCHECK_BIN),$(STATICCHECK))

govulncheck:
	$(call goinstall,$(GOVULNCHECK_BIN),$(GOVULNCHECK))

upstream:
	@cd tools/service_cmd && GOWORK=off $(GO) tool -n service_cmd

toxiproxy:
	@cd tools && GOWORK=off $(GO) tool -n server

helm:
	@cd tools && GOWORK=off $(GO) tool -n helm

# redis-server and redis-cli (Cluster and Sentinel tests), nginx (the load
# balancer of the scale-out test), gcc for the race detector (cgo), git
# (the version test commits a checkout of its own), nodejs and Debian's
# node-express (clients/node's tests, with no npm packages; Express lives
# in /usr/share/nodejs). nginx lives in /usr/sbin, which a non-root PATH
# may lack. deploy/'s tests: promtool (Debian's prometheus) checks and
# unit-tests the alert rules, podman builds and runs the image (runc
# beside it: crun refuses a hybrid cgroup hierarchy), systemd-analyze
# (systemd) verifies the unit; chromium and firefox-esr: the dashboard's
# end-to-end tests (-tags e2e) drive them headless, Chromium with chromedp
# over the DevTools protocol, Firefox with puppeteer-core over WebDriver
# BiDi, run by node; npm installs the puppeteer-core that tools/node's
# package-lock.json pins into tools/node/node_modules (npm ci, again when
# the lock file is newer than what it installed).
deps:
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	command -v redis-cli >/dev/null 2>&1 || missing="$$missing redis-tools"; \
	command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing="$$missing nginx"; \
	command -v promtool >/dev/null 2>&1 || missing="$$missing prometheus"; \
	command -v podman >/dev/null 2>&1 || missing="$$missing podman"; \
	command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || missing="$$missing runc"; \
	command -v systemd-analyze >/dev/null 2>&1 || missing="$$missing systemd"; \
	command -v gcc >/dev/null 2>&1 || missing="$$missing gcc"; \
	command -v git >/dev/null 2>&1 || missing="$$missing git"; \
	command -v node >/dev/null 2>&1 || missing="$$missing nodejs"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	[ -f /usr/share/nodejs/express/package.json ] || missing="$$missing node-express"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v firefox-esr >/dev/null 2>&1 || command -v firefox >/dev/null 2>&1 || missing="$$missing firefox-esr"; \
	if [ -n "$$missing" ]; then \
		echo "installing with apt-get:$$missing"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing || exit 1; \
	fi; \
	[ tools/node/node_modules/.package-lock.json -nt tools/node/package-lock.json ] || \
		npm ci --prefix tools/node --ignore-scripts --no-audit --no-fund

# make image: the container image of deploy/Dockerfile, tagged $(IMAGE),
# with podman (or docker). IMAGE_BINARY=prebuilt builds the static binary
# here and copies it in, for a machine that cannot pull the golang image
# (BASE=scratch for one that cannot pull distroless either).
IMAGE        ?= sluice:latest
IMAGE_BINARY ?= source
BASE         ?= gcr.io/distroless/static-debian12:nonroot
CONTAINER    ?= $(shell command -v podman 2>/dev/null || command -v docker 2>/dev/null || echo podman)

image:
ifeq ($(IMAGE_BINARY),prebuilt)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags="-s -w" -o sluice ./cmd/sluice
endif
	$(CONTAINER) build -f deploy/Dockerfile --build-arg BINARY=$(IMAGE_BINARY) --build-arg BASE=$(BASE) -t $(IMAGE) .

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)
	$(GO) vet -tags $(TAGS) $(PKGS)
	GOARCH=386 $(GO) vet -tags $(TAGS) $(PKGS)
	cd internal/tools/kubestrict && $(GO) vet ./...

lint: staticcheck
	$(STATICCHECK_BIN) -tags $(TAGS) $(PKGS)

# make vuln: govulncheck over ./... against the pinned database snapshot.
# It fails on any vulnerability the code calls that
# internal/tools/vulndb/accepted.txt does not list with a reason (about
# 20 s here once the tools are built).
vuln: govulncheck vulndb
	$(GOVULNCHECK_BIN) -format json -db file://$(VULNDB_DIR) $(PKGS) > $(VULNDB_DIR).json
	$(GO) run ./internal/tools/vulndb check -accept internal/tools/vulndb/accepted.txt < $(VULNDB_DIR).json

# make vulndb: build the database snapshot, once per version.
vulndb:
	@$(GO) run ./internal/tools/vulndb build -version $(VULNDB_VERSION) -out $(VULNDB_DIR)

# A short run of each fuzz target beyond its seed corpus (which go test
# runs anyway). Runs are counted in executions, not seconds: a time limit
# that expires mid-input makes go test report "context deadline exceeded"
# as a failure on a loaded machine. Minimizing a new input is capped in
# executions too where inputs can be 64 KiB: by default it may take a
# minute, during which no execution is counted.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 20000x ./config/
	$(GO) test -run '^$$' -fuzz '^FuzzClientIP$$' -fuzztime 100000x ./policy/
	$(GO) test -run '^$$' -fuzz '^FuzzBucketEqualsGCRA$$' -fuzztime 300000x ./internal/algo/
	$(GO) test -run '^$$' -fuzz '^FuzzHandler$$' -fuzztime 100000x -fuzzminimizetime 500x ./internal/service/server/
	$(GO) test -run '^$$' -fuzz '^FuzzDescriptors$$' -fuzztime 40000x -fuzzminimizetime 500x ./internal/service/envoy/

# make bench: the figures of BENCHMARKS.md, side by side in one run on
# this machine (about 6½ minutes on the shared 2-core VM without the
# service side), from
# bench/ (a module of its own; see bench/README.md):
#  1. the Go micro-benchmarks of the in-process stores (and one Redis
#     pair), and their benchstat;
#  2. cmd/libbench: sluice beside redis_rate, ulule/limiter and throttled
#     on one redis-server it starts -> results/library.json;
#  3. cmd/servicebench: the service beside envoyproxy/ratelimit,
#     gubernator and an empty gRPC server -> results/service.json;
#  4. cmd/report: results/*.json -> BENCHMARKS.md and results/charts/*.svg.
BENCHSTAT   := golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
BENCH_MICRO := -run '^$$' -bench 'Memory|Redis/(redis_rate|sluice-gcra-rueidis)/' -benchmem -benchtime=100ms -count 6 .

bench: deps
	mkdir -p bench/results
	cd bench && $(GO) test $(BENCH_MICRO) > results/micro.txt
	cd bench && $(GO) run $(BENCHSTAT) results/micro.txt > results/micro-benchstat.txt
	cd bench && $(GO) run ./cmd/libbench -out results/library.json -micro results/micro.txt -micro-cmd "go test $(BENCH_MICRO) > results/micro.txt"
	cd bench && $(GO) run ./cmd/servicebench -out results/service.json
	cd bench && $(GO) run ./cmd/report -out ../BENCHMARKS.md -benchstat-cmd "go run $(BENCHSTAT) results/micro.txt > results/micro-benchstat.txt"

# make soak, not part of make test: sluice serve with a real redis-server
# (on_error local) at 500 requests/s for 10 minutes, Redis restarted twice
# and hung once (SIGSTOP for 10s); a report row every 10s (answers,
# errors, degraded, p99, RSS), then a summary. It fails when a client saw
# an error. SOAK_DURATION=60s make soak for a short try.
soak: deps
	$(GO) run ./internal/tools/soak

# make stress, not part of make test: the timing-sensitive tests,
# STRESS_TESTS (the one place that states them: each PKG=REGEXP is one
# package, built once with go test -c -race -tags $(TAGS), and the -run
# regexp of its tests), 10 runs of each (STRESS_RUNS; STRESS_P at a time,
# default 1) with golang.org/x/tools/cmd/stress (a tool directive of
# tools/go.mod), beside a CPU hog (one spinning shell per core at the
# tests' priority, killed by pid after the last run). scripts/stress.sh
# does it; it prints each failed run's output and the file keeping it, how
# many runs of each package passed and the hog's CPU time, and fails if
# any run failed (10 runs took 43 minutes on the 2-core VM shared with
# other builds). STRESS_RUNS=2 make stress for a short try;
# STRESS_TESTS="'./store/memory=^TestLRU\$|^TestSweepEvery\$'" for another
# set: each entry a word of the shell, quoted (its $ kept as it is).
STRESS_TESTS ?= \
	'./cmd/sluice=Fault|^TestDashboard|^TestServeSlowBodies|^TestMaxInflight|^TestProxyProgress|^TestServeGRPCLimits|^TestServeGRPCInflight|^TestMaxHeaderBytes|^TestListenFlagErrors|^TestManyKeepAlive|^TestFloodUniqueKeys|^TestNet' \
	'.=^TestBreaker|^TestProbeOwnsItsRequest' \
	'./store/redis=Breaker|^TestOutage|^TestHungServer|^TestExactUnderConcurrency|^TestSettleExact|^TestHarnessCatchesRace|^TestStackedExact|^TestCoalesceExact|^TestConformance|^TestLinearizable' \
	'./internal/service/admin=.'

stress: toxiproxy
	@GO='$(GO)' TAGS='$(TAGS)' sh scripts/stress.sh $(value STRESS_TESTS)

run:
	$(GO) run ./examples/basic
