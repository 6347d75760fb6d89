#!/usr/bin/env bash
# The example alerting rules parse (promtool check rules) and fire on the
# series they are meant for (promtool test rules). promtool comes from
# Debian's prometheus package (.ci/install-deps); under a second here.
set -euo pipefail
if ! command -v promtool >/dev/null; then
  if [ "$(id -u)" != 0 ]; then echo "not root and no promtool: skipping the rules check"; exit 0; fi
  echo "promtool missing: .ci/install-deps installs the prometheus package" >&2
  exit 1
fi
cd packaging/prometheus
promtool check rules mailctl.rules.yml
promtool test rules mailctl.rules.test.yml
