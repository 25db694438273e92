#!/usr/bin/env bash
# Builds the Go tools the offline deployment checks use, from the Go module proxy, once per version:
#   helm      helm.sh/helm/v4/cmd/helm                          (helm lint, helm template: deploy/helm)
#   promtool  github.com/prometheus/prometheus/cmd/promtool     (check and test the alert rules: deploy/monitoring)
# Binaries are cached by version in $LAMINAR_CACHE_DIR/tools (default ~/.cache/laminar-kafka/tools):
# a cold build takes about 2.5 (helm) and 4 (promtool) minutes on 2 cores, a warm run a second.
# Prints `LAMINAR_HELM=<path>` and `LAMINAR_PROMTOOL=<path>` on its last two lines, for
# `export $(bash .ci/go-tools.sh | tail -2)`. Needs Go 1.24+ (`go` on PATH, or Debian's golang).
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-v4.3.2}
PROMTOOL_VERSION=${PROMTOOL_VERSION:-v0.316.0}
CACHE=${LAMINAR_CACHE_DIR:-$HOME/.cache/laminar-kafka}/tools

say() { echo "go-tools.sh: $*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  for candidate in /usr/local/go/bin /usr/lib/go/bin; do
    [ -x "$candidate/go" ] && PATH="$candidate:$PATH"
  done
fi
if ! command -v go >/dev/null 2>&1; then
  say "Go is not installed: apt-get install golang-go (1.24 or later), or see https://go.dev/doc/install"
  exit 1
fi

build() {  # $1 name, $2 module path of the command, $3 version
  local dir="$CACHE/$1-$3"
  if [ ! -x "$dir/$1" ]; then
    say "building $1 $3 (once; cached in $dir)"
    mkdir -p "$dir"
    GOBIN="$dir" CGO_ENABLED=0 GOFLAGS=-mod=mod go install "$2@$3" >&2
  fi
  echo "$dir/$1"
}

helm=$(build helm helm.sh/helm/v4/cmd/helm "$HELM_VERSION")
promtool=$(build promtool github.com/prometheus/prometheus/cmd/promtool "$PROMTOOL_VERSION")
echo "LAMINAR_HELM=$helm"
echo "LAMINAR_PROMTOOL=$promtool"
