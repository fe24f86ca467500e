#!/usr/bin/env bash
# The images (`./tasks image`, tests/deploy/test_image.py) are made from Debian's packages with
# mmdebstrap and built with podman (setup.d/30-podman.sh). Idempotent.
set -euo pipefail
dpkg-query -W -f='${Status}' mmdebstrap 2>/dev/null | grep -q 'install ok installed' \
  || apt_install mmdebstrap
