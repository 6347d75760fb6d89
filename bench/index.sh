#!/usr/bin/env bash
# Index memory benchmark: the daemon's RSS and message.list latency as its
# mailboxes grow. Builds mailctl, runs bench/indexmem (which runs `mailctl
# dev` in a temporary folder, fills one mailbox with 100k messages and ten
# with 10k, and one with 1k), and writes the index section of
# docs/benchmarks.md. No root needed; about two minutes and 1 GB of disk.
#
#   bench/index.sh             # measure and rewrite the index section
#   bench/index.sh --no-write  # measure and print only
#
# Knobs (environment): BIG=100000, SMALL=10000, N=10.
set -euo pipefail
BIG=${BIG:-100000}
SMALL=${SMALL:-10000}
N=${N:-10}
WRITE=1
[[ ${1:-} == --no-write ]] && WRITE=0

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
DOC=$ROOT/docs/benchmarks.md
cd "$ROOT"
BIN=$(mktemp -d)/mailctl
go build -o "$BIN" ./cmd/mailctl
TABLE=$(go run ./bench/indexmem -bin "$BIN" -big "$BIG" -small "$SMALL" -n "$N")
rm -rf "$(dirname "$BIN")"
printf '%s\n' "$TABLE"

MODEL=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
FS=$(df -T "${TMPDIR:-/tmp}" | awk 'NR == 2 { print $2 }')
SECTION=$(
	cat <<SEC
<!-- index:begin -->
## The index: daemon memory and \`message.list\` as mailboxes grow

Measured by \`bench/index.sh\` on $(date -u +%Y-%m-%d): \`mailctl dev\` with one mailbox of
$BIG messages, $N of $SMALL and one of 1,000, written straight into the folders. Each
round starts the daemon, reads its RSS, lists the first page (50 rows) of every inbox
once (cold), reads its RSS again, then lists the big and the 1k inbox 20 times (warm,
median). The first start has no index files and parses every message; the restart reads
the index files the first one wrote.

$TABLE

- "per stored message" is (RSS after listing − RSS after start) ÷ messages. Memory
  keeps a skeleton per message (id, order, file stamp, flags, where its row is in the
  folder's index file, about 0.2 KiB); rows are read from the file for the page
  returned. \`store.IndexCacheMessages\` (200,000) bounds the skeletons held: past it
  the least recently used folders leave memory and are read back from their files.
- Machine: $(nproc) CPUs ($MODEL), Linux $(uname -r), $FS, $(go version | awk '{print $3}').
<!-- index:end -->
SEC
)
if [[ $WRITE == 1 ]]; then write_section index "$DOC" "$SECTION"; fi
