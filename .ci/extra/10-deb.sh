#!/usr/bin/env bash
# Builds the .deb, installs it, runs setup and serve from it, removes it.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then echo "not root: skipping the package test"; exit 0; fi
bash packaging/test-deb.sh
