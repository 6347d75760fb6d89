#!/usr/bin/env bash
# Profile-guided build: remakes cmd/mailctl/default.pgo, the CPU profile the
# Go compiler optimizes mailctl for (`go build` takes it from the main
# package's directory by itself; GOFLAGS=-pgo=off builds without it). The
# profile is of `mailctl serve` under the inbound and outbound benchmarks'
# loads, one run of each (bench/run.sh and bench/outbound.sh, every daemon
# they start writing its profile with --cpu-profile), merged. Needs what
# those two need: root and Debian's postfix package.
#
#   sudo bench/pgo.sh        # rewrite cmd/mailctl/default.pgo
#
# Knobs (environment): SETTLE=3 (seconds between measurements; the numbers
# of these runs are not kept, only the profiles).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
[[ $(id -u) == 0 ]] || { echo "bench: needs root, as bench/run.sh does: sudo bench/pgo.sh" >&2; exit 1; }
command -v go >/dev/null || { echo "bench: go not found" >&2; exit 1; }

PROF=$(mktemp -d "${TMPDIR:-/tmp}/mailctl-pgo.XXXXXX")
trap 'rm -rf "$PROF"' EXIT

echo "bench: inbound loads under the profiler" >&2
CPU_PROFILE=$PROF CASES="8x4096 32x4096 8x102400 8x1048576" VARIANTS=kept REPS=1 \
	SETTLE=${SETTLE:-3} GOBENCH=0 STRACE=0 bash "$ROOT/bench/run.sh" --no-write >/dev/null
echo "bench: outbound load under the profiler" >&2
CPU_PROFILE=$PROF REPS=1 SETTLE=${SETTLE:-3} STRACE=0 PERF=0 POSTFIX=0 \
	bash "$ROOT/bench/outbound.sh" --no-write >/dev/null

n=$(find "$PROF" -name '*.pprof' -size +0 | wc -l)
((n > 0)) || { echo "bench: no profile was written" >&2; exit 1; }
(cd "$ROOT" && go tool pprof -proto "$PROF"/*.pprof >"$PROF/merged" 2>/dev/null)
mv "$PROF/merged" "$ROOT/cmd/mailctl/default.pgo"
echo "bench: cmd/mailctl/default.pgo from $n daemon profiles; where their CPU went:" >&2
(cd "$ROOT" && go tool pprof -top -nodecount=15 cmd/mailctl/default.pgo 2>/dev/null | sed -n '/flat%/,$p')
