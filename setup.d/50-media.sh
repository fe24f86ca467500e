#!/usr/bin/env bash
# The media capabilities agent's tests (tests/media/) build a fake VA driver and a libdrm shim
# with gcc against libva-dev and libdrm-dev, and load them through the real libva (libva2,
# libva-drm2: the sonames the agent opens with ctypes). vainfo is used for a round-trip check.
set -euo pipefail
need=()
for p in gcc libc6-dev pkg-config libva-dev libdrm-dev libva2 libva-drm2 vainfo; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if [ "${#need[@]}" -gt 0 ]; then
  apt_install "${need[@]}"
fi
