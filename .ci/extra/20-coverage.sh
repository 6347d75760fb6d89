#!/usr/bin/env bash
# Coverage of the real binary in the multi-host scenarios, merged with the
# unit tests' coverage, reported as one number per source (docs/e2e.md).
set -euo pipefail
if [ "$(id -u)" != 0 ]; then echo "not root: the multi-host scenarios skip, coverage not merged"; exit 0; fi
cov=$(mktemp -d)
mkdir -p "$cov/unit" "$cov/e2e" "$cov/all"
MAILCTL_COVERDIR="$cov/e2e" go test -count=1 ./test/netns/ >"$cov/e2e.log" 2>&1 || { tail -50 "$cov/e2e.log"; exit 1; }
go test -count=1 -cover -coverpkg=github.com/mailctl/mailctl/... $(go list ./... | grep -v '/test/') \
  -args -test.gocoverdir="$cov/unit" >"$cov/unit.log" 2>&1 || { tail -50 "$cov/unit.log"; exit 1; }
go tool covdata merge -i="$cov/unit,$cov/e2e" -o "$cov/all"
for part in e2e unit all; do
  go tool covdata textfmt -i="$cov/$part" -o "$cov/$part.out"
  printf 'coverage %-4s %s\n' "$part" "$(go tool cover -func="$cov/$part.out" | tail -1 | awk '{print $NF}')"
done
rm -rf "$cov"
