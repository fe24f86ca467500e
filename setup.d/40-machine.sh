#!/usr/bin/env bash
# The machine side's tests (tests/machine/) run the real modprobe in dry-run mode against a
# module tree they build, and read the serio ioctl constants' headers' facts.
set -euo pipefail
command -v modprobe >/dev/null 2>&1 || [ -x /usr/sbin/modprobe ] || [ -x /sbin/modprobe ] || apt_install kmod
