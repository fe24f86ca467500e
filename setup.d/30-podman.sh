#!/usr/bin/env bash
# The plugin's end-to-end tests (tests/plugin/test_podman.py) run a real CDI consumer: podman
# 4.3.1 from Debian with runc, two containers.conf settings a CI VM like ours needs (its
# root lacks CAP_SYS_RESOURCE, so podman's default rlimits fail; crun refuses the
# hybrid cgroup layout, runc works), and a busybox image imported from busybox-static (no
# registry is reachable). Idempotent: each step is skipped when already done.
set -euo pipefail
need=()
for p in podman runc busybox-static; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if [ "${#need[@]}" -gt 0 ]; then
  apt_install "${need[@]}"
fi

MARK="# liken-devices setup.d/30-podman.sh"
conf_body="$MARK
[containers]
default_ulimits = [\"nofile=1024:1024\", \"nproc=1024:1024\"]
[engine]
runtime = \"runc\"
cgroup_manager = \"cgroupfs\"
events_logger = \"file\"
"
mkdir -p /etc/containers
if [ ! -e /etc/containers/containers.conf ] || grep -qF "$MARK" /etc/containers/containers.conf; then
  target=/etc/containers/containers.conf
else
  # Someone else's containers.conf: leave it, add ours as a drop-in that overrides it.
  mkdir -p /etc/containers/containers.conf.d
  target=/etc/containers/containers.conf.d/50-liken-devices.conf
fi
if [ "$(cat "$target" 2>/dev/null)" != "$(printf '%s' "$conf_body")" ]; then
  printf '%s' "$conf_body" > "$target.tmp" && mv "$target.tmp" "$target"
fi

IMAGE=localhost/liken-bbox:latest
if ! podman image exists "$IMAGE"; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp"/rootfs/{bin,dev,proc,sys,etc,tmp}
  cp /bin/busybox "$tmp/rootfs/bin/"
  for a in $("$tmp/rootfs/bin/busybox" --list); do
    [ "$a" = busybox ] || ln -s busybox "$tmp/rootfs/bin/$a"
  done
  tar -C "$tmp/rootfs" -cf "$tmp/rootfs.tar" .
  podman import -q --change 'CMD ["/bin/sh"]' --change 'ENV PATH=/bin' "$tmp/rootfs.tar" "$IMAGE" >/dev/null
fi
# Smoke test: the runtime starts a container (fails loudly here rather than in the suite).
podman run --rm --network none "$IMAGE" true </dev/null
