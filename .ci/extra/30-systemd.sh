#!/usr/bin/env bash
# Boots the unit under systemd as PID 1 (debootstrap + systemd-nspawn) with the
# built .deb: setup, start, reload, a certificate renewed with docs/setup.md's
# certbot deploy hook, crash restart, stop, the debug drop-in, purge. About a
# minute, most of it debootstrap fetching from Debian's mirror; nothing is cached.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then echo "not root: skipping the systemd boot test"; exit 0; fi
bash packaging/test-systemd.sh
