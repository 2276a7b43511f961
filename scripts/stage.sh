#!/bin/sh
# The stages of make test (the Makefile's test target): each is a make
# target, made by a make of its own; this script times one, and prints the
# table of them all at the end.
#
#   sh scripts/stage.sh run DIR MAKE TARGET
#     makes TARGET with MAKE, each line of its output after "TARGET | "
#     (stages run beside each other), between "==> TARGET" and
#     "<== TARGET: ok, 1m02s" (or FAILED); records in DIR/log when it
#     started, how long it took, its processor time (user and system, of
#     make and every process it waited for) and make's exit status, and
#     exits with that status.
#   sh scripts/stage.sh table DIR T0 TARGET...
#     prints, for each TARGET in that order, when it started (minutes:
#     seconds after T0, date +%s.%N), how long it took, its processor time
#     and whether it passed, failed or never ran, then the total.
set -u

# dur SECONDS: tenths of a second under a minute, else 3m07s.
dur='function dur(d,  s) { if (d < 59.95) return sprintf("%.1fs", d); s = int(d + 0.5); return sprintf("%dm%02ds", int(s / 60), s % 60) }'

case ${1:-} in
run)
	dir=$2 make=$3 name=$4
	echo "==> $name"
	start=$(date +%s.%N)
	pad=$(printf '%-11s' "$name")
	# The status of make, not of sed, is the stage's.
	{ $make --no-print-directory "$name" 2>&1; echo $? >"$dir/$name.rc"; } | sed -u "s/^/$pad | /"
	end=$(date +%s.%N)
	rc=$(cat "$dir/$name.rc" 2>/dev/null || echo 1)
	# times, not in a pipe (a subshell's own children are none): the
	# second line is the processor time of every child waited for.
	times >"$dir/$name.times"
	cpu=$(awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); sub("s", "", a[2]); t += a[1] * 60 + a[2] } print t }' "$dir/$name.times")
	echo "$name $start $end ${cpu:-0} $rc" >>"$dir/log"
	awk -v s="$start" -v e="$end" -v n="$name" -v rc="$rc" "$dur"'
		BEGIN { if (rc == 0) printf "<== %s: ok, %s\n", n, dur(e - s); else printf "<== %s: FAILED after %s (exit status %s)\n", n, dur(e - s), rc }'
	exit "$rc"
	;;
table)
	dir=$2 t0=$3
	shift 3
	touch "$dir/log"
	awk -v t0="$t0" -v now="$(date +%s.%N)" -v names="$*" "$dur"'
		function clock(d,  s) { s = int(d); return sprintf("%d:%02d", int(s / 60), s % 60) }
		{ start[$1] = $2; end[$1] = $3; cpu[$1] = $4; rc[$1] = $5; if ($5 != 0 && failed == "") failed = $1 }
		END {
			n = split(names, name, " ")
			w = length("total")
			for (i = 1; i <= n; i++) if (length(name[i]) > w) w = length(name[i])
			f = "  %-" w "s  %5s  %6s  %6s  %s\n"
			print "\nstage times (start: minutes:seconds into the run; cpu: processor time, user and system):"
			printf f, "stage", "start", "took", "cpu", "result"
			for (i = 1; i <= n; i++) {
				s = name[i]
				if (!(s in start)) { printf f, s, "", "", "", "not run"; continue }
				total += cpu[s]
				printf f, s, clock(start[s] - t0), dur(end[s] - start[s]), dur(cpu[s]), (rc[s] == 0 ? "ok" : "FAILED (exit status " rc[s] ")")
			}
			printf f, "total", "", dur(now - t0), dur(total), (failed == "" ? "ok" : "FAILED at " failed)
		}' "$dir/log"
	;;
*)
	echo "usage: sh scripts/stage.sh run DIR MAKE TARGET | table DIR T0 TARGET..." >&2
	exit 2
	;;
esac
