#!/usr/bin/env bash
# Builds the images of the two programs, liken-devices and liken-media, from this repository with
# no network but the package registries (docs/guide.md, "Prerequisites", the paragraph "Images"):
#   1. the project's wheel, and its dependencies' wheels for the image's Python, downloaded now;
#   2. a minimal Debian root made with mmdebstrap from Debian's packages (the host's apt sources),
#      per program: Python, libstdc++ (grpcio's C++ core), kmod (modprobe) and the PCI/USB ID
#      files; libva, its DRM backend and the Intel iHD driver for the media agent;
#   3. `podman build --network=none` installs the wheels into /opt/liken inside that root.
# The result is reproducible: mmdebstrap honours SOURCE_DATE_EPOCH (sorted tar, fixed mtimes),
# the build clamps layer times with --timestamp and byte-code is hash-based, so the same inputs
# give the same image ID.
#
# usage: scripts/image.sh [PROGRAM...]        (default: liken-devices liken-media)
# prints one line per image: program, name:tag, image ID, size in bytes, seconds it took.
# environment: IMAGE_REPO (default localhost), IMAGE_TAG (default: the project's version),
#   IMAGE_BUILD_DIR (default build/image), DEBIAN_SOURCES (an apt sources file; default the
#   host's), SOURCE_DATE_EPOCH (default: the last commit's time), PYTHON (default: the venv's).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
VERSION=$("$PY" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
REPO=${IMAGE_REPO:-localhost}
TAG=${IMAGE_TAG:-$VERSION}
OUT=${IMAGE_BUILD_DIR:-build/image}
SUITE=bookworm               # the image's Debian release; its python3 is 3.11
PYVER=3.11
PIP_VERSION=24.3.1            # runs the offline install from its wheel; not kept in the image
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
PROGRAMS=("$@")
[ ${#PROGRAMS[@]} -gt 0 ] || PROGRAMS=(liken-devices liken-media)

if [ -z "${DEBIAN_SOURCES:-}" ]; then
  for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
    if [ -s "$f" ]; then DEBIAN_SOURCES=$f; break; fi
  done
fi
: "${DEBIAN_SOURCES:?no apt sources found; set DEBIAN_SOURCES}"
for tool in mmdebstrap podman; do
  command -v "$tool" >/dev/null || { echo "image: $tool is missing (setup.d/65-image.sh)" >&2; exit 2; }
done

packages() {
  case "$1" in
    liken-devices) echo python3,libstdc++6,kmod,hwdata ;;
    liken-media) echo python3,libstdc++6,hwdata,libva2,libva-drm2,intel-media-va-driver ;;
    *) echo "image: unknown program $1" >&2; exit 2 ;;
  esac
}

# The media agent needs no privilege; liken-devices loads modules and writes drivers_probe.
user() { [ "$1" = liken-media ] && echo 65532:65532 || echo 0:0; }

mkdir -p "$OUT/wheels"
rm -f "$OUT"/wheels/*.whl
echo "image: wheels" >&2
# The project's wheel from a clean copy of its sources: an in-tree build would reuse ./build/lib,
# where a module deleted from src/ can linger.
srccopy=$(mktemp -d)
trap 'rm -rf "$srccopy"' EXIT
tar -C . --exclude=__pycache__ --exclude='*.egg-info' -cf - pyproject.toml README.md LICENSE src \
  | tar -C "$srccopy" -xf -
"$PY" -m pip wheel -q --disable-pip-version-check --no-deps -w "$OUT/wheels" "$srccopy"
mapfile -t deps < <("$PY" -c 'import tomllib; [print(d) for d in tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]]')
arch=$(uname -m)
"$PY" -m pip download -q --disable-pip-version-check -d "$OUT/wheels" --only-binary=:all: \
  --python-version "$PYVER" --implementation cp --abi "cp${PYVER/./}" \
  $(for v in $(seq 36 -1 17); do echo --platform "manylinux_2_${v}_$arch"; done) \
  --platform "manylinux2014_$arch" "${deps[@]}" "pip==$PIP_VERSION"

for program in "${PROGRAMS[@]}"; do
  ctx="$OUT/$program"
  mkdir -p "$ctx"
  start=$(date +%s)
  echo "image: $program: Debian root ($SUITE)" >&2
  mmdebstrap --quiet --mode=root --format=tar --variant=essential --include="$(packages "$program")" \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/*' \
    "$SUITE" "$ctx/root.tmp.tar" "$DEBIAN_SOURCES" >"$ctx/mmdebstrap.log" 2>&1 \
    || { tail -n 30 "$ctx/mmdebstrap.log" >&2; exit 1; }
  mv "$ctx/root.tmp.tar" "$ctx/root.tar"
  rm -rf "$ctx/wheels"
  cp -r "$OUT/wheels" "$ctx/wheels"
  { cat deploy/image/Containerfile
    printf 'USER %s\n' "$(user "$program")"
    printf 'ENTRYPOINT ["/opt/liken/bin/%s"]\n' "$program"
    printf 'LABEL org.opencontainers.image.title="%s" org.opencontainers.image.version="%s" org.opencontainers.image.licenses="Apache-2.0"\n' \
      "$program" "$VERSION"
  } > "$ctx/Containerfile"
  echo "image: $program: install (no network)" >&2
  podman build -q --network=none --timestamp "$SOURCE_DATE_EPOCH" --layers=false \
    --build-arg PROGRAM="$program" --build-arg SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" \
    -t "$REPO/$program:$TAG" -f "$ctx/Containerfile" "$ctx" >/dev/null
  id=$(podman image inspect --format '{{.Id}}' "$REPO/$program:$TAG")
  size=$(podman image inspect --format '{{.Size}}' "$REPO/$program:$TAG")
  printf '%s\t%s:%s\t%s\t%s\t%s\n' "$program" "$REPO/$program" "$TAG" "$id" "$size" \
    "$(( $(date +%s) - start ))"
done
