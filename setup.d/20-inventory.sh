#!/usr/bin/env bash
# The inventory's tests record this machine with umockdev-record (it calls udevadm, from udev,
# and no daemon is started), and `scan` names hardware from the system's hwdata (pci.ids, usb.ids).
set -euo pipefail
need=()
for p in umockdev udev hwdata; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if [ "${#need[@]}" -gt 0 ]; then
  apt_install "${need[@]}"
fi
