#!/usr/bin/env bash
# Runs every benchmark, each side by side with Postfix where one compares, and
# rewrites its section of docs/benchmarks.md:
#   inbound  (bench/run.sh)       smtp-source into mailctl vs Postfix → Maildir
#   outbound (bench/outbound.sh)  queue, sign, deliver to smtp-sink vs Postfix relaying
#   mcp      (bench/mcp.sh)       mailctl mcp start-up, tools/list, email_list at 1k and 100k
# Needs root (private Postfix instances, throwaway users). Pass --no-write to
# print the sections without touching the doc.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
for b in run.sh outbound.sh mcp.sh; do
  echo "== bench/$b"
  bash "$here/$b" "$@"
done
