#!/usr/bin/env bash
# The benchmarks (tests/bench, `./tasks bench`) compare the project with what a user would run
# otherwise (lspci from pciutils, udevadm from udev), count a re-walk's syscalls with strace, and
# give the measured agent a cluster CA made with openssl. Idempotent.
set -euo pipefail
need=()
for p in pciutils strace openssl; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if [ "${#need[@]}" -gt 0 ]; then
  apt_install "${need[@]}"
fi
