#!/usr/bin/env bash
# MCP benchmark: how long an agent harness waits from spawning `mailctl mcp`
# to the tools/list answer, and email_list latency (the message.list verb it
# calls) on mailboxes of 1k and 100k messages. Runs the Go benchmarks that
# measure these and writes the numbers to the mcp section of
# docs/benchmarks.md. No root needed.
#
#   bench/mcp.sh               # measure and rewrite the mcp section of docs/benchmarks.md
#   bench/mcp.sh --no-write    # measure and print only
#
# Knobs (environment): COUNT=3 (repeats of the tools/list benchmarks),
# SPAWNS=50 (spawns per repeat), LISTS=1000 (message.list calls per mailbox size and repeat).
set -euo pipefail

COUNT=${COUNT:-3}
SPAWNS=${SPAWNS:-50}
LISTS=${LISTS:-1000}
WRITE=1
[[ ${1:-} == --no-write ]] && WRITE=0

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
DOC=$ROOT/docs/benchmarks.md
cd "$ROOT"
command -v go >/dev/null || { echo "bench: go not found" >&2; exit 1; }

CMD_SPAWN="go test ./test/mcp -run '^\$' -bench 'SpawnToolsList\$' -benchtime ${SPAWNS}x -count $COUNT"
CMD_SHIM="go test ./mcpshim -run '^\$' -bench 'ToolsList\$' -count $COUNT"
CMD_STDIO="go test ./mcpshim -run '^\$' -bench 'ToolsListStdio\$' -benchtime 1000x -count $COUNT"
CMD_LIST="go test ./daemon -run '^\$' -bench MessageList -benchtime ${LISTS}x -count $COUNT"

run() { # run CMD: the benchmark lines of its output; fails when the command does
	local out
	echo "bench: $1" >&2
	out=$(eval "$1" 2>&1) || { printf '%s\n' "$out" >&2; exit 1; }
	printf '%s\n' "$out" | grep -E '^(Benchmark|ok|goos|goarch|cpu|pkg)'
}
OUT_SPAWN=$(run "$CMD_SPAWN")
OUT_SHIM=$(run "$CMD_SHIM")
OUT_STDIO=$(run "$CMD_STDIO")
OUT_LIST=$(run "$CMD_LIST")

# stat OUTPUT NAME UNIT: "median (min–max)" in ms of the metric with UNIT
# (ns/op or a custom one) over the lines of benchmark NAME.
stat() {
	printf '%s\n' "$1" | awk -v name="$2" -v unit="$3" '
		$1 ~ "^Benchmark" name "(-[0-9]+)?$" { for (i = 3; i < NF; i++) if ($(i + 1) == unit) v[++n] = (unit == "ns/op") ? $i / 1e6 : $i }
		END {
			if (n == 0) { print "n/a"; exit }
			for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
			m = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
			if (n == 1) printf "%.2f", m; else printf "%.2f (%.2f–%.2f)", m, v[1], v[n]
		}'
}
median_of() { stat "$@" | awk '{ print $1 }'; }

SPAWN=$(stat "$OUT_SPAWN" SpawnToolsList ns/op)
NEWLIST=$(stat "$OUT_SHIM" ToolsList/new-server-and-list ns/op)
LISTONLY=$(stat "$OUT_SHIM" ToolsList/list-only ns/op)
STDIO=$(stat "$OUT_STDIO" ToolsListStdio ns/op)
STDIOKB=$(stat "$OUT_STDIO" ToolsListStdio bytes/op | awk '{ printf "%.1f", $1 / 1024 }')
L1K=$(stat "$OUT_LIST" MessageList/1k ns/op)
L100K=$(stat "$OUT_LIST" MessageList/100k ns/op)
B1K=$(stat "$OUT_LIST" MessageList/1k first-start-ms)
B100K=$(stat "$OUT_LIST" MessageList/100k first-start-ms)
R1K=$(stat "$OUT_LIST" MessageList/1k restart-ms)
R100K=$(stat "$OUT_LIST" MessageList/100k restart-ms)
RATIO=$(awk -v a="$(median_of "$OUT_LIST" MessageList/100k ns/op)" -v b="$(median_of "$OUT_LIST" MessageList/1k ns/op)" 'BEGIN { printf "%.2f×", a / b }')

MODEL=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
MEM=$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
FS=$(df -T "${TMPDIR:-/tmp}" | awk 'NR == 2 { print $2 }')
SECTION=$(
	cat <<EOF
<!-- mcp:begin -->
## MCP: \`mailctl mcp\` start-up and \`email_list\`

Measured by \`bench/mcp.sh\` on $(date -u +%Y-%m-%d). Milliseconds; median and (min–max) over
$COUNT repeats where there are several.

| what | ms |
| --- | --- |
| spawn \`mailctl mcp\` → initialize → \`tools/list\` answer → exit, per spawn ($SPAWNS spawns per repeat) | $SPAWN |
| in process: new MCP server, connect, initialize, \`tools/list\` (no exec) | $NEWLIST |
| \`tools/list\` on an open session, go-sdk client in process | $LISTONLY |
| \`tools/list\` on an open stdio session, server side: request line in, $STDIOKB KiB response line out | $STDIO |
| \`email_list\` (\`message.list\`, 50 rows) on a 1k-message mailbox, index warm | $L1K |
| \`email_list\` (\`message.list\`, 50 rows) on a 100k-message mailbox, index warm | $L100K |
| 100k ÷ 1k | $RATIO |
| first \`message.list\` after a restart (the index read, checked against the folder), 1k messages | $R1K |
| first \`message.list\` after a restart (the index read, checked against the folder), 100k messages | $R100K |
| first \`message.list\` of the first start (no index: every message read into it), 1k messages | $B1K |
| first \`message.list\` of the first start (no index: every message read into it), 100k messages | $B100K |

- Spawn: \`BenchmarkSpawnToolsList\` (test/mcp) builds \`mailctl\`, then per iteration starts
  \`mailctl mcp --socket …\` with the go-sdk \`CommandTransport\`, initializes, lists the tools
  and closes (which waits for the process to exit). The control socket is served by
  the real daemon run in-process by internal/testdaemon (tools/list never calls it), so this
  is the MCP server's own start-up cost.
- \`BenchmarkToolsList\` (mcpshim) is the same without exec, over in-memory transports.
  Most of its \`tools/list\` time is the go-sdk client's: it decodes the answer into
  generic maps and re-encodes every tool's input schema to check it, and the in-memory
  transport encodes the message once more. \`BenchmarkToolsListStdio\` times what the server
  itself costs a harness on \`mailctl mcp\`'s stdio transport (write the request line, read
  the response line, no decoding). That cost is proportional to the answer's size; the
  server used to encode the already-encoded result a second time on the way out (a third of
  its time), which it no longer does: in one sitting, median of five runs of 1000, 0.99 ms
  before and 0.50 ms after.
- \`email_list\`: \`BenchmarkMessageList\` (daemon/bench_test.go) starts a real daemon, writes
  the mailbox's Markdown files and lets them settle for a second (as a mailbox at rest: files
  changed within the last second are checked again on every call), times the first
  \`message.list\` (no index yet; calls answered unavailable while the start-up indexing reads
  the folder are made again, timed from the first), restarts the daemon on the same state and times its
  first call (the index the first start wrote), then times $LISTS calls through the
  control socket, 50 rows each, every other one filtered to unread (whose total the folder
  keeps between calls while nothing changes).
- Machine: $(nproc) CPUs ($MODEL), $MEM RAM, Linux $(uname -r), $FS, $(go version | awk '{print $3}').
  The machine was shared with other work while measuring.

Reproduce (Go as in go.mod; from the repository root; no root needed):

\`\`\`
bench/mcp.sh                 # rewrites this section
bench/mcp.sh --no-write      # prints it only
$CMD_SPAWN
$CMD_SHIM
$CMD_STDIO
$CMD_LIST
\`\`\`

Raw output of the run:

\`\`\`
$OUT_SPAWN
$OUT_SHIM
$OUT_STDIO
$OUT_LIST
\`\`\`
<!-- mcp:end -->
EOF
)

if [[ $WRITE == 0 ]]; then
	printf '%s\n' "$SECTION"
	exit 0
fi
write_section mcp "$DOC" "$SECTION"
