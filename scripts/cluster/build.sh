#!/usr/bin/env bash
# Build the test cluster's binaries from the Go module proxy into a cache outside the checkout:
#   $LIKEN_K8S_CACHE/bin-k8s-<version>/  kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl
#   $LIKEN_K8S_CACHE/bin-etcd-<version>/ etcd
#   $LIKEN_K8S_CACHE/bin-ctrd-<version>/ containerd containerd-shim-runc-v2 ctr
#   $LIKEN_K8S_CACHE/bin-runc-<version>/ runc
#   $LIKEN_K8S_CACHE/bin-helm-<version>/ helm   (the chart's tests: tests/deploy/test_helm.py)
# A binary set already present (its .done stamp) is reused. Kubernetes' and etcd's main modules
# carry replace directives, which `go install pkg@version` refuses; each is built from a small
# wrapper module that requires it and maps its staging modules to their published versions.
# Usage: build.sh [KUBERNETES_VERSION]   (default: versions.env's KUBERNETES_VERSION)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
K=${1:-$KUBERNETES_VERSION}
CACHE=${LIKEN_K8S_CACHE:-/var/cache/liken-k8s}
command -v go >/dev/null || { echo "cluster: no Go toolchain on this machine (the test cluster is built with go)" >&2; exit 3; }
export GOFLAGS=-mod=mod GOTOOLCHAIN=local
mkdir -p "$CACHE"
have_all() {
  for d in "bin-k8s-$K" "bin-etcd-$ETCD_VERSION" "bin-ctrd-$CONTAINERD_VERSION" "bin-runc-$RUNC_VERSION-seccomp" \
           "bin-helm-$HELM_VERSION"; do
    [ -f "$CACHE/$d/.done" ] || return 1
  done
}
if ! have_all && ! timeout 120 go list -m "k8s.io/kubernetes@v$K" >/dev/null 2>&1; then
  echo "cluster: the Go module proxy ($(go env GOPROXY)) does not answer for k8s.io/kubernetes@v$K" >&2
  exit 3
fi

say() { echo "cluster: $*" >&2; }
stamp_ok() { [ -f "$1/.done" ]; }

build_helm() {
  local out="$CACHE/bin-helm-$HELM_VERSION"
  stamp_ok "$out" && return 0
  say "building helm v$HELM_VERSION"
  mkdir -p "$out"
  # Helm's main module has no replace directives: `go install pkg@version` builds it as
  # released. Its version string is set as its own release process sets it.
  CGO_ENABLED=0 GOBIN="$out" go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=v$HELM_VERSION" \
    "helm.sh/helm/v4/cmd/helm@v$HELM_VERSION"
  touch "$out/.done"
}

build_k8s() {
  local out="$CACHE/bin-k8s-$K" w="$CACHE/src-k8s-$K" minor=${K#1.}
  stamp_ok "$out" && return 0
  say "building Kubernetes v$K (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl)"
  mkdir -p "$w" "$out"
  cd "$w"
  [ -f go.mod ] || go mod init liken.local/k8sbuild >/dev/null 2>&1
  go mod edit -require="k8s.io/kubernetes@v$K"
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@v$K" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  grep -E '^[[:space:]]+k8s\.io/[a-z0-9-]+(/[a-z0-9-]+)? v0\.0\.0[[:space:]]*(//.*)?$' "$gomod" | awk '{print $1}' | sort -u |
    while read -r m; do go mod edit -replace="$m=$m@v0.$minor"; done
  local ldf="-s -w -X k8s.io/component-base/version.gitVersion=v$K -X k8s.io/component-base/version.gitMajor=1"
  ldf+=" -X k8s.io/component-base/version.gitMinor=${minor%%.*} -X k8s.io/client-go/pkg/version.gitVersion=v$K"
  ldf+=" -X k8s.io/component-base/version.gitTreeState=clean"
  CGO_ENABLED=0 go build -trimpath -ldflags "$ldf" -o "$out/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl
  touch "$out/.done"
}

build_etcd() {
  local out="$CACHE/bin-etcd-$ETCD_VERSION" w="$CACHE/src-etcd-$ETCD_VERSION"
  stamp_ok "$out" && return 0
  say "building etcd v$ETCD_VERSION"
  mkdir -p "$w" "$out"
  cd "$w"
  [ -f go.mod ] || go mod init liken.local/etcdbuild >/dev/null 2>&1
  go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >/dev/null 2>&1
  CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$out/etcd" go.etcd.io/etcd/server/v3
  touch "$out/.done"
}

build_containerd() {
  local out="$CACHE/bin-ctrd-$CONTAINERD_VERSION"
  stamp_ok "$out" && return 0
  say "building containerd v$CONTAINERD_VERSION"
  mkdir -p "$out"
  CGO_ENABLED=0 GOBIN="$out" go install -trimpath -ldflags '-s -w' \
    "github.com/containerd/containerd/v2/cmd/containerd@v$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@v$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/ctr@v$CONTAINERD_VERSION"
  touch "$out/.done"
}

build_runc() {
  local out="$CACHE/bin-runc-$RUNC_VERSION-seccomp"
  stamp_ok "$out" && return 0
  say "building runc v$RUNC_VERSION"
  mkdir -p "$out"
  # runc's seccomp support is a build tag, with cgo and libseccomp (setup.d/70-cluster.sh
  # installs libseccomp-dev): without it every container with a seccomp profile fails.
  CGO_ENABLED=1 GOBIN="$out" go install -trimpath -tags seccomp -ldflags '-s -w' \
    "github.com/opencontainers/runc@v$RUNC_VERSION"
  touch "$out/.done"
}

build_etcd
build_containerd
build_runc
build_helm
build_k8s
say "binaries ready in $CACHE"
