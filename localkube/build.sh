#!/usr/bin/env bash
# Builds localkube (and its kubectl link) for one Kubernetes release.
#   localkube/build.sh v1.37.2 .build/localkube-v1.37.2
# The release pinned in localkube/go.mod builds from the committed go.mod/go.sum.
# Another release (make test KUBE_VERSION=v1.34.4) builds from a copy whose
# go.mod requires that release and its matching k8s.io staging modules.
set -euo pipefail
version=${1:?Kubernetes release, e.g. v1.37.2}
out=${2:?output directory}
here=$(cd "$(dirname "$0")" && pwd)
command -v go >/dev/null || { echo "localkube: Go is required (https://go.dev/dl/)" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
pinned=$(awk '$1=="k8s.io/kubernetes"{print $2}' "$here/go.mod")
src=$here
if [ "$version" != "$pinned" ]; then
  src="$out/src"
  rm -rf "$src" && mkdir -p "$src"
  cp "$here"/*.go "$here/go.mod" "$src/"
  staging=v0.${version#v1.}
  (
    cd "$src"
    go mod edit -require="k8s.io/kubernetes@$version"
    for mod in $(go mod edit -json | python3 -c 'import json,sys; print("\n".join(r["Old"]["Path"] for r in json.load(sys.stdin).get("Replace") or []))'); do
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
mv "$out/localkube.tmp" "$out/localkube"
ln -sf localkube "$out/kubectl"
echo "localkube: built $out/localkube in $(( $(date +%s) - start ))s" >&2
