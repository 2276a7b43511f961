#!/bin/sh
# make stress: the timing-sensitive tests, several times in a row beside a
# CPU hog, with golang.org/x/tools/cmd/stress (a tool directive of
# tools/go.mod). Run it from the repository's root; make stress does:
#
#   sh scripts/stress.sh PKG=REGEXP...
#
# Each PKG=REGEXP (one package) is built once, before the hog starts, as
# make test builds it: go test -c -race -tags integration,e2e. Its tests
# matching REGEXP then run STRESS_RUNS times (default 10), STRESS_P at a
# time (default 1: one run after another), each run one
# `PKG.test -test.run REGEXP -test.count=1` in the package's directory (as
# go test runs it), under stress, which kills (SIGABRT, for the goroutine
# dump) a run that takes longer than STRESS_TIMEOUT (default 15m), prints
# the start of each failed run's output and keeps the whole of it in a
# file it names. The hog is STRESS_HOGS processes (default one per core,
# nproc), each a shell spinning, at the tests' priority, started before
# the first run and killed by pid after the last (or on an interrupt); a
# hog process that ends early fails the stress. At the end a line per
# package gives how many runs passed; the script exits 1 when any run
# failed, a package did not build, or a REGEXP matched no test.
set -u

GO=${GO:-go}
TAGS=${TAGS:-integration,e2e}
runs=${STRESS_RUNS:-10}
par=${STRESS_P:-1}
hogs=${STRESS_HOGS:-$(nproc)}
timeout=${STRESS_TIMEOUT:-15m}

# die: before the first run, with nothing to keep.
die() {
	echo "stress: $*" >&2
	[ -z "${work:-}" ] || rm -rf "$work"
	exit 1
}

case $runs in '' | *[!0-9]* | 0) die "STRESS_RUNS=$runs: not a positive number of runs" ;; esac
case $par in '' | *[!0-9]* | 0) die "STRESS_P=$par: not a positive number" ;; esac
case $hogs in '' | *[!0-9]*) die "STRESS_HOGS=$hogs: not a number" ;; esac
[ $# -gt 0 ] || die "no tests: give PKG=REGEXP arguments (make stress gives the default set, STRESS_TESTS)"

stress=$(cd tools && GOWORK=off "$GO" tool -n stress) || die "cannot build golang.org/x/tools/cmd/stress (cd tools && GOWORK=off $GO tool -n stress)"
work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-stress-XXXXXX") || exit 1

# The hog: one spinning shell per core, killed by pid when this script
# exits, however it exits.
hog="" spid=""
stop() {
	trap - EXIT INT TERM
	# Interrupted during a run: stress and the test binary it runs (its
	# child, by parent pid: stress does not pass a signal on).
	if [ -n "$spid" ]; then
		for c in $(pgrep -P "$spid"); do kill "$c" 2>/dev/null; done
		kill "$spid" 2>/dev/null
		wait "$spid" 2>/dev/null
	fi
	tick=$(getconf CLK_TCK)
	cpu=0
	for p in $hog; do
		# utime and stime, fields 14 and 15 of /proc/PID/stat, in ticks.
		t=$(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null || echo 0)
		cpu=$((cpu + t))
		kill "$p" 2>/dev/null
	done
	for p in $hog; do wait "$p" 2>/dev/null; done
	rm -f "$work"/*.test
	if [ -n "$hog" ]; then
		wall=$(($(date +%s) - hog_start))
		awk -v c="$cpu" -v t="$tick" -v w="$wall" -v n="$hogs" 'BEGIN {
			s = c / t; printf "hog: %d processes, %ds of CPU in %ds, %.2f CPUs on average\n", n, s, w, (w > 0 ? s / w : 0) }'
	fi
}
trap 'stop' EXIT
trap 'exit 130' INT TERM

# name PKG: the file name of PKG's test binary.
name() {
	case $1 in . | ./) echo root ;; *) printf '%s\n' "${1#./}" | tr '/.' '__' ;; esac
}

echo "stress: $runs runs ($par at a time) of ${#} packages beside $hogs hog processes on $(nproc) CPUs; work directory $work (kept when a run fails)"
for arg; do
	pkg=${arg%%=*} re=${arg#*=}
	[ "$pkg" != "$arg" ] && [ -n "$pkg" ] && [ -n "$re" ] || die "argument '$arg': want PKG=REGEXP, e.g. './cmd/sluice=^TestFault'"
	dirs=$("$GO" list -f '{{.Dir}}' "$pkg") || die "$pkg: go list failed"
	[ "$(echo "$dirs" | wc -l)" -eq 1 ] || die "$pkg: names $(echo "$dirs" | wc -l) packages; want one per PKG=REGEXP"
	bin=$work/$(name "$pkg").test
	echo "  go test -c -race -tags $TAGS -o $bin $pkg"
	"$GO" test -c -race -tags "$TAGS" -o "$bin" "$pkg" || die "$pkg: go test -c failed"
	[ -x "$bin" ] || die "$pkg: has no test files"
	(cd "$dirs" && "$bin" -test.list "$re") | grep -q . || die "$pkg: -run '$re' matches no test"
done

hog_start=$(date +%s)
i=0
while [ "$i" -lt "$hogs" ]; do
	sh -c 'while :; do :; done' &
	hog="$hog $!"
	i=$((i + 1))
done

failed=""
summary=""
for arg; do
	pkg=${arg%%=*} re=${arg#*=}
	dir=$("$GO" list -f '{{.Dir}}' "$pkg")
	n=$(name "$pkg")
	echo
	echo "==> $pkg -test.run '$re': $runs runs"
	start=$(date +%s)
	# stress in the background and a wait, which a signal interrupts (a
	# foreground command would hold off the trap until it ended); tail
	# shows its output as it comes.
	(cd "$dir" && exec "$stress" -count "$runs" -p "$par" -timeout "$timeout" -o "$work/$n-failure-" \
		"$work/$n.test" -test.run "$re" -test.count=1) >"$work/$n.out" 2>&1 &
	spid=$!
	tail -n +1 -f --pid="$spid" "$work/$n.out" &
	tpid=$!
	wait "$spid"
	rc=$?
	spid=""
	wait "$tpid"
	took=$(($(date +%s) - start))
	fails=$(sed -n 's/.* runs total, \([0-9]*\) failures.*/\1/p' "$work/$n.out" | tail -n 1)
	if [ "$rc" -ne 0 ]; then
		failed="$failed $pkg"
		summary="$summary
FAIL $pkg: ${fails:-?} of $runs runs failed (${took}s; each failed run's output: $work/$n-failure-*)"
	else
		summary="$summary
ok   $pkg: $runs of $runs runs passed (${took}s)"
	fi
	for p in $hog; do
		# A hog that exited is a zombie until waited for: its state is Z.
		case $(awk '{ print $3 }' "/proc/$p/stat" 2>/dev/null) in '' | Z) echo "stress: hog process $p exited: the load was not there for the whole run" >&2; failed="$failed (hog)" ;; esac
	done
done
echo
stop
echo "$summary" | sed 1d
if [ -n "$failed" ]; then
	echo "FAIL:$failed"
	exit 1
fi
rm -rf "$work"
echo "PASS: every run of every package passed"
