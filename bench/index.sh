#!/usr/bin/env bash
# Index benchmark: the daemon's memory, message.list and search as mailboxes
# grow, this tree against the previous release in one run on the same mail.
# Builds mailctl from this tree and from PREV (a git worktree of that
# commit), runs bench/indexmem (which runs `mailctl dev` in a temporary
# folder, fills one mailbox with BIG messages, N with SMALL and one with
# 1,000, and measures each binary REPS times), and writes the index section
# of docs/benchmarks.md. No root needed; about 15 minutes and 3 GB of disk
# at the defaults.
#
#   bench/index.sh             # measure and rewrite the index section
#   bench/index.sh --no-write  # measure and print only
#
# Knobs (environment): BIG=100000 SMALL=10000 N=10 REPS=3 INGEST=20000
# PREV=c0b29a8 (the previous release; empty: this tree only).
set -euo pipefail
BIG=${BIG:-100000}
SMALL=${SMALL:-10000}
N=${N:-10}
REPS=${REPS:-3}
INGEST=${INGEST:-20000}
PREV=${PREV-c0b29a8}
WRITE=1
[[ ${1:-} == --no-write ]] && WRITE=0

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
DOC=$ROOT/docs/benchmarks.md
cd "$ROOT"
WORK=$(mktemp -d)
cleanup() {
	if [[ -n $PREV && -d $WORK/prev ]]; then git worktree remove --force "$WORK/prev" >/dev/null 2>&1 || true; fi
	rm -rf "$WORK"
}
trap cleanup EXIT
go build -o "$WORK/mailctl" ./cmd/mailctl
go build -o "$WORK/indexmem" ./bench/indexmem
ARGS=(-bin "$WORK/mailctl" -big "$BIG" -small "$SMALL" -n "$N" -reps "$REPS" -ingest "$INGEST")
PREV_NAME=""
if [[ -n $PREV ]]; then
	git worktree add --detach "$WORK/prev" "$PREV" >/dev/null 2>&1
	(cd "$WORK/prev" && go build -o "$WORK/mailctl-prev" ./cmd/mailctl)
	PREV_NAME="previous release ($(git rev-parse --short "$PREV"))"
	ARGS+=(-prev "$WORK/mailctl-prev" -prev-label "$PREV_NAME")
fi
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
TABLE=$("$WORK/indexmem" "${ARGS[@]}")
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
printf '%s\n' "$TABLE"

MODEL=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
FS=$(df -T "${TMPDIR:-/tmp}" | awk 'NR == 2 { print $2 }')
SECTION=$(
	cat <<SEC
<!-- index:begin -->
## The index: daemon memory, \`message.list\` and search as mailboxes grow

Measured by \`bench/index.sh\` on $(date -u +%Y-%m-%d): \`mailctl dev\` with one mailbox of
$BIG messages, $N of $SMALL and one of 1,000, written straight into the folders (bodies of
about 1.5 KB drawn from a skewed vocabulary), this tree and ${PREV_NAME:-nothing else} in one run on
the same mail, $REPS repetitions each: median and (min–max). Each start reads the daemon's
RSS, lists the first page (50 rows) of every inbox once (cold), reads its RSS again, then
lists the big and the 1k inbox $((20)) times (warm, median). The first start has no index
(this tree: no \`state_dir/index/\`; the previous release: no \`.mailctl-index.*\` files) and
reads every message; the restart reads the index the first one wrote. Load average
(1, 5, 15 min) before: $LOAD0; after: $LOAD1.

$TABLE

- "per stored message" is (RSS after listing − RSS after start) ÷ messages. This tree keeps
  nothing per message in memory: the index is a SQLite database in \`state_dir/index/\` whose
  page cache is bounded (4 MiB for each of 3 connections, no memory map), so what a start
  adds is that cache and the collector's slack, whatever the number of messages. The
  previous release kept a skeleton of every message (about 0.2 KiB) in memory.
- Search: this tree's \`query\` (Gmail's language) against the full-text index. The previous
  release had no query; its \`text\` filter (substrings of subject, sender and snippet, not the
  body) is timed for the same words, and finds fewer messages.
- Indexing: the first listing of the big mailbox after a start with no index, which reads,
  parses and indexes its files; \`mailctl reindex\` does the same for every mailbox.
- Steady ingest: RSS grows by what the collector keeps between cycles and the index's cache
  filling, not by the messages: see the per-message column at $INGEST messages. The two
  binaries take turns ($REPS ingests each, each into a fresh mailbox of the same store), so
  that what the file system did just before weighs on both alike; msg/s is the rate the
  4 sessions were answered 250, this tree's index writes included (they are batched off the
  path to the 250, so they cost CPU, not waiting).
- Machine: $(nproc) CPUs ($MODEL), Linux $(uname -r), $FS, $(go version | awk '{print $3}').
  Compare rows of the same run; the load average above says how busy the machine was.

Reproduce (Go as in go.mod; from the repository root; no root needed):

\`\`\`
bench/index.sh                 # rewrites this section
bench/index.sh --no-write      # prints it only
BIG=$BIG SMALL=$SMALL N=$N REPS=$REPS INGEST=$INGEST PREV=$PREV bench/index.sh
\`\`\`
<!-- index:end -->
SEC
)
if [[ $WRITE == 1 ]]; then write_section index "$DOC" "$SECTION"; fi
