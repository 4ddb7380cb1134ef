#!/usr/bin/env bash
# Builds localkube and kubectl for one Kubernetes release.
#   localkube/build.sh v1.37.2 .build/localkube-v1.37.2 [--system]
# --system also builds the system tier's binaries: the upstream kubelet of the
# same release (cmd/kubelet, sharing the packages already compiled for
# localkube) and the pause container's binary (cmd/pause, static).
# The release pinned in localkube/go.mod builds from the committed go.mod/go.sum.
# Another release (make test KUBE_VERSION=v1.34.4) builds from a copy whose
# go.mod requires that release and its matching k8s.io staging modules.
set -euo pipefail
version=${1:?Kubernetes release, e.g. v1.37.2}
out=${2:?output directory}
system=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
command -v go >/dev/null || { echo "localkube: Go is required (https://go.dev/dl/)" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
pinned=$(awk '$1=="k8s.io/kubernetes"{print $2}' "$here/go.mod")
src=$here
if [ "$version" != "$pinned" ]; then
  # A module of its own for that release: k8s.io/kubernetes at $version, each
  # staging module at the matching v0.x (as its own go.mod lays them out), and
  # the embedded etcd at the release of the etcd client that release uses.
  src="$out/src"
  rm -rf "$src" && mkdir -p "$src"
  cp "$here"/*.go "$src/" && mkdir -p "$src/cmd" && cp -r "$here/cmd/kubectl" "$here/cmd/kubelet" "$here/cmd/pause" "$src/cmd/"
  modfile=$(cd "$src" && go mod download -json "k8s.io/kubernetes@$version" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  staging=v0.${version#v1.}
  etcd=$(awk '$1=="go.etcd.io/etcd/client/v3"{print $2; exit}' "$modfile")
  (
    cd "$src"
    go mod init elb-gate/localkube >/dev/null 2>&1
    go mod edit -go="$(awk '$1=="go"{print $2; exit}' "$modfile")"
    go mod edit -require="k8s.io/kubernetes@$version" -require="go.etcd.io/etcd/server/v3@$etcd"
    for mod in $(awk '$2=="=>" && $3 ~ /^\.\/staging/ {print $1}' "$modfile"); do
      go mod edit -replace="$mod=$mod@$staging"
    done
    go mod tidy
  )
fi
minor=$(echo "$version" | cut -d. -f2)
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
echo "localkube: building Kubernetes $version (the first build compiles the Kubernetes sources: several minutes)" >&2
start=$(date +%s)
(cd "$src" && go build -buildvcs=false -ldflags "$ldflags" -o "$out/localkube.tmp" .)
(cd "$src" && go build -buildvcs=false -ldflags "$ldflags" -o "$out/kubectl.tmp" ./cmd/kubectl)
mv "$out/localkube.tmp" "$out/localkube"
rm -f "$out/kubectl" && mv "$out/kubectl.tmp" "$out/kubectl"
echo "localkube: built $out/localkube in $(( $(date +%s) - start ))s" >&2
if [ "$system" = "--system" ]; then
  start=$(date +%s)
  (cd "$src" && go build -buildvcs=false -ldflags "$ldflags" -o "$out/kubelet.tmp" ./cmd/kubelet)
  (cd "$src" && CGO_ENABLED=0 go build -buildvcs=false -ldflags "-s -w" -o "$out/pause.tmp" ./cmd/pause)
  mv "$out/kubelet.tmp" "$out/kubelet" && mv "$out/pause.tmp" "$out/pause"
  echo "localkube: built the system tier's kubelet and pause in $(( $(date +%s) - start ))s" >&2
fi
