#!/usr/bin/env bash
# The node agent's tests (tests/agent/) make real kernel uevents with veth pairs, which need
# `ip` from iproute2 (docs/agent.md). Idempotent: nothing is installed when present.
set -euo pipefail
if ! command -v ip >/dev/null 2>&1; then
  apt_install iproute2
fi
