#!/usr/bin/env bash
# The real-cluster tier (tests/cluster, ./tasks cluster): Debian's CNI plugins for the pod
# network, libseccomp for building runc, openssl for the cluster's certificates, and the
# binaries themselves, built from the Go module proxy into a cache outside the checkout
# (scripts/cluster/build.sh; reused when present). Idempotent.
set -euo pipefail
need=()
for p in containernetworking-plugins libseccomp-dev pkg-config openssl iproute2 gcc libc6-dev curl; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if [ "${#need[@]}" -gt 0 ]; then
  apt_install "${need[@]}"
fi
exec "$(dirname "$0")/../scripts/cluster/build.sh"
