#!/usr/bin/env bash
# Builds the binaries of e2e/realcp (a real Kubernetes control plane, kwok, Velero, moto S3,
# cert-manager) from the committed Go modules and requirements.txt beside this script, into a
# cache outside the repo:
#
#   ${RESTORE_HOOKS_REALCP_CACHE:-$HOME/.cache/restore-hooks-realcp}/
#     bin/      kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok velero
#               certmanager prometheus promtool
#               kube-apiserver-floor  (the oldest supported Kubernetes minor: controlplane-floor/)
#     plugins/  velero-plugin-for-aws         (Velero's --plugin-dir)
#     share/    kwok/stages/*.yaml kwok/crds/execs.yaml  (kwok's "fast" lifecycle stages, its Exec CRD)
#               cert-manager/crds/*.yaml      (cert-manager's CRDs, from its module's deploy/crds)
#     venv/     moto[server,s3] + boto3
#     stamps/   one per component: sha256 of what it was built from
#
# usage: build.sh [--quiet] [controlplane] [floor] [velero] [certmanager] [prometheus] [all]   (default: all)
#   --quiet: print nothing when everything is up to date (the test harness passes it)
#
# A component is rebuilt only when its stamp differs from the sha256 of its module's go.mod and
# go.sum (and main.go, where the module has one) or requirements.txt, plus this script's recipe,
# so a warm run takes well under a second and changing a pin rebuilds exactly what it pins.
# Concurrent runs serialize on a flock in the cache dir; a build that dies part-way leaves no
# stamp and is redone next time.
#
# Needs: go (>= the go lines of the go.mod files) and the Go module proxy, python3 with venv and
# PyPI, flock, sha256sum. A warm cache needs neither go nor the network.
set -euo pipefail

# Bump when a build flag or layout below changes, so every cache rebuilds.
RECIPE=1

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${RESTORE_HOOKS_REALCP_CACHE:-$HOME/.cache/restore-hooks-realcp}
BIN=$CACHE/bin PLUGINS=$CACHE/plugins SHARE=$CACHE/share STAMPS=$CACHE/stamps

log() { printf '[realcp-build %(%T)T] %s\n' -1 "$*" >&2; }
die() {
  printf '[realcp-build] FAILED: %s\n' "$*" >&2
  exit 1
}

want_cp=0 want_floor=0 want_velero=0 want_cm=0 want_prom=0 quiet=0 built=0
for a in "$@"; do
  case $a in
  --quiet) quiet=1 ;;
  controlplane) want_cp=1 ;;
  floor) want_floor=1 ;;
  velero) want_velero=1 ;;
  certmanager) want_cm=1 ;;
  prometheus) want_prom=1 ;;
  all) want_cp=1 want_floor=1 want_velero=1 want_cm=1 want_prom=1 ;;
  *) die "unknown argument '$a' (usage: build.sh [--quiet] [controlplane] [floor] [velero] [certmanager] [prometheus] [all])" ;;
  esac
done
if [ $want_cp = 0 ] && [ $want_floor = 0 ] && [ $want_velero = 0 ] && [ $want_cm = 0 ] && [ $want_prom = 0 ]; then
  want_cp=1 want_floor=1 want_velero=1 want_cm=1 want_prom=1
fi

for tool in flock sha256sum; do
  command -v "$tool" >/dev/null || die "'$tool' is not on PATH (Debian: apt-get install util-linux coreutils)"
done
mkdir -p "$BIN" "$PLUGINS" "$SHARE" "$STAMPS" || die "cannot create the cache dir $CACHE"

exec 9>"$CACHE/build.lock"
if ! flock -n 9; then
  log "another build holds $CACHE/build.lock; waiting for it"
  flock 9
fi

# Go and the Go toolchain are only needed when something is stale; checked once, on first need.
go_checked=0
need_go() {
  [ $go_checked = 1 ] && return
  command -v go >/dev/null || die "go is not on PATH: install Go >= 1.26 (https://go.dev/dl) to build the real control plane, or point RESTORE_HOOKS_REALCP_CACHE at a built cache"
  log "$(go version)"
  go_checked=1
}
# -mod=readonly: the committed go.mod/go.sum are the pins; a build must never rewrite them (and a
# user's GOFLAGS=-mod=mod must not either). GOTOOLCHAIN=local: no toolchain download.
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false"

stamp_of() { # component file... -> sha256 of the recipe, the component's name and the files
  local c=$1
  shift
  { echo "recipe=$RECIPE component=$c"; cat "$@"; } | sha256sum | cut -d' ' -f1
}
fresh() { # component stamp output...
  local c=$1 s=$2
  shift 2
  [ "$(cat "$STAMPS/$c" 2>/dev/null)" = "$s" ] || return 1
  local f
  for f in "$@"; do [ -e "$f" ] || return 1; done
}
secs() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
summary=()
record() { summary+=("$(printf '%-26s %s' "$1" "$2")"); }

go_build() { # component module-dir package output [extra go build args...]
  local c=$1 moddir=$2 mod=$here/$2 pkg=$3 out=$4
  shift 4
  # A module with a main.go of its own (certmanager/) is built from it too: it is in the stamp.
  local s srcs=("$mod/go.mod" "$mod/go.sum")
  [ -f "$mod/main.go" ] && srcs+=("$mod/main.go")
  s=$(stamp_of "$c" "${srcs[@]}")
  if fresh "$c" "$s" "$out"; then
    record "$c" "up to date"
    return
  fi
  need_go
  rm -f "$STAMPS/$c"
  log "$c: building $pkg (module e2e/realcp/$moddir)"
  built=1
  local t0=$EPOCHREALTIME
  (cd "$mod" && go build -trimpath "$@" -o "$out.tmp.$$" "$pkg") ||
    die "$c: 'go build $pkg' in $mod failed (output above). A missing module means the Go module proxy was unreachable; a compile error means the pins in $moddir/go.mod are inconsistent (regenerate them with e2e/realcp/pin.sh)"
  mv -f "$out.tmp.$$" "$out"
  echo "$s" >"$STAMPS/$c"
  local d
  d=$(secs "$t0")
  log "$c: built in ${d} s"
  record "$c" "built in ${d} s"
}

modver() { # module-dir module -> the version its go.mod requires (read directly: no network)
  local v
  v=$(awk -v m="$2" '($1 == m || ($1 == "require" && $2 == m)) { print $NF; exit }' "$here/$1/go.mod")
  [ -n "$v" ] && echo "$v"
}

# The version ldflags are what Kubernetes' own build (hack/lib/version.sh) sets: without them the
# binaries report v0.0.0-master, and the apiserver's --emulated-version range is computed from its
# own version (and the floor tests read the floor's version from its --version).
kube() { # component module-dir command: k8s.io/kubernetes/cmd/<command> of that module's pin
  local c=$1 moddir=$2 cmd=$3 s k
  s=$(stamp_of "$c" "$here/$moddir/go.mod" "$here/$moddir/go.sum")
  if fresh "$c" "$s" "$BIN/$c"; then
    record "$c" "up to date"
    return
  fi
  need_go
  k=$(modver "$moddir" k8s.io/kubernetes) || die "cannot read the k8s.io/kubernetes version from $moddir/go.mod"
  local minor=${k#v1.}
  minor=${minor%%.*}
  local ld="-s -w"
  local p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$k -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  go_build "$c" "$moddir" "k8s.io/kubernetes/cmd/$cmd" "$BIN/$c" -tags=selinux,notest,grpcnotrace -ldflags "$ld"
}

build_controlplane() {
  kube kube-apiserver controlplane kube-apiserver
  kube kube-controller-manager controlplane kube-controller-manager
  kube kube-scheduler controlplane kube-scheduler
  kube kubectl controlplane kubectl
  go_build etcd controlplane go.etcd.io/etcd/server/v3 "$BIN/etcd" -ldflags "-s -w"
  go_build kwok kwok sigs.k8s.io/kwok/cmd/kwok "$BIN/kwok" -ldflags "-s -w"

  # kwok's lifecycle stages and its CRDs ship as YAML in its module, not in the binary (kwok
  # watches its CRDs but does not install them): keep copies so the harness needs no Go module
  # cache at run time.
  local s
  s=$(stamp_of kwok-share "$here/kwok/go.mod" "$here/kwok/go.sum")
  if fresh kwok-share "$s" "$SHARE/kwok/stages/pod-ready.yaml" "$SHARE/kwok/crds/execs.yaml"; then
    record kwok-share "up to date"
  else
    need_go
    rm -f "$STAMPS/kwok-share"
    local src
    src=$(cd "$here/kwok" && go mod download sigs.k8s.io/kwok && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
    [ -d "$src/kustomize/stage" ] || die "kwok-share: sigs.k8s.io/kwok source not found in the Go module cache ($src)"
    rm -rf "$SHARE/kwok"
    mkdir -p "$SHARE/kwok/stages" "$SHARE/kwok/crds"
    cp "$src/kustomize/stage/node/fast/node-initialize.yaml" \
      "$src/kustomize/stage/pod/fast/pod-ready.yaml" \
      "$src/kustomize/stage/pod/fast/pod-complete.yaml" \
      "$src/kustomize/stage/pod/fast/pod-delete.yaml" "$SHARE/kwok/stages/"
    cp "$src/kustomize/crd/bases/kwok.x-k8s.io_execs.yaml" "$SHARE/kwok/crds/execs.yaml"
    chmod 644 "$SHARE/kwok/stages/"* "$SHARE/kwok/crds/"*
    echo "$s" >"$STAMPS/kwok-share"
    built=1
    record kwok-share "copied"
  fi
}

build_floor() {
  # kube-apiserver of the oldest Kubernetes minor restore-hooks supports (the kubeVersion floor of
  # charts/restore-hooks/Chart.yaml), its own module: a real binary of that version, not v1.37
  # emulating it. Only the API server: the floor tests run controlplane/'s controller-manager and
  # scheduler with --emulated-version at this minor, and its etcd, kubectl and kwok.
  kube kube-apiserver-floor controlplane-floor kube-apiserver
}

build_velero() {
  local s
  s=$(stamp_of velero "$here/velero/go.mod" "$here/velero/go.sum")
  if fresh velero "$s" "$BIN/velero"; then
    record velero "up to date"
  else
    need_go
    local v
    v=$(modver velero github.com/vmware-tanzu/velero) || die "cannot read the Velero version from velero/go.mod"
    # buildinfo.Version names the image `velero install` would use, and is what `velero version` shows.
    go_build velero velero github.com/vmware-tanzu/velero/cmd/velero "$BIN/velero" \
      -ldflags "-s -w -X github.com/vmware-tanzu/velero/pkg/buildinfo.Version=$v -X github.com/vmware-tanzu/velero/pkg/buildinfo.GitTreeState=clean"
  fi
  go_build velero-plugin-for-aws velero-aws github.com/vmware-tanzu/velero-plugin-for-aws/velero-plugin-for-aws \
    "$PLUGINS/velero-plugin-for-aws" -ldflags "-s -w"

  command -v python3 >/dev/null || die "moto: python3 is not on PATH (Debian: apt-get install python3 python3-venv)"
  s=$({ python3 --version; cat "$here/requirements.txt"; } | stamp_of moto -)
  if fresh moto "$s" "$CACHE/venv/bin/moto_server"; then
    record moto "up to date"
  else
    rm -f "$STAMPS/moto"
    log "moto: creating $CACHE/venv from requirements.txt"
    built=1
    local t0=$EPOCHREALTIME
    rm -rf "$CACHE/venv"
    python3 -m venv "$CACHE/venv" || die "moto: 'python3 -m venv' failed (Debian: apt-get install python3-venv)"
    "$CACHE/venv/bin/pip" install --quiet --disable-pip-version-check --no-input \
      --require-hashes -r "$here/requirements.txt" ||
      die "moto: pip install -r e2e/realcp/requirements.txt failed (output above; PyPI unreachable, or a pin without its hash)"
    echo "$s" >"$STAMPS/moto"
    local d
    d=$(secs "$t0")
    log "moto: venv ready in ${d} s"
    record moto "venv in ${d} s"
  fi
}

build_certmanager() {
  # Not upstream's cmd/controller and cmd/cainjector (modules of their own, not served by the
  # module proxy) but certmanager/main.go, which starts the same controllers from the module's
  # pkg/ (see its header).
  go_build certmanager certmanager . "$BIN/certmanager" -ldflags "-s -w"

  # The CRDs ship as YAML in the module (deploy/crds, what upstream's Helm chart templates its
  # CRDs from), not in the binary: keep copies so that the harness needs no module cache.
  local s
  s=$(stamp_of certmanager-crds "$here/certmanager/go.mod" "$here/certmanager/go.sum")
  if fresh certmanager-crds "$s" "$SHARE/cert-manager/crds/cert-manager.io_certificates.yaml"; then
    record certmanager-crds "up to date"
  else
    need_go
    rm -f "$STAMPS/certmanager-crds"
    local src
    src=$(cd "$here/certmanager" && go mod download github.com/cert-manager/cert-manager &&
      go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)
    [ -f "$src/deploy/crds/cert-manager.io_certificates.yaml" ] ||
      die "certmanager-crds: deploy/crds not found in the cert-manager module ($src)"
    rm -rf "$SHARE/cert-manager"
    mkdir -p "$SHARE/cert-manager/crds"
    cp "$src"/deploy/crds/*.yaml "$SHARE/cert-manager/crds/"
    chmod 644 "$SHARE/cert-manager/crds/"*
    echo "$s" >"$STAMPS/certmanager-crds"
    built=1
    record certmanager-crds "copied"
  fi
}

build_prometheus() {
  # Prometheus v3 and promtool, one module (github.com/prometheus/prometheus; its v0.3XY.Z tags
  # are Prometheus 3.XY.Z). Built as upstream's release build does (.promu.yml: the version
  # ldflags) except for two tags: without `builtinassets` the web UI is served from disk, i.e. not
  # at all (the tests use the HTTP API only), and `remove_all_sd` leaves out every service
  # discovery but static, file and HTTP, whose cloud SDKs would double the build. The PromQL
  # engine, the rule manager, the TSDB and `promtool test rules` are untouched by either.
  local mod=$here/prometheus
  if fresh prometheus "$(stamp_of prometheus "$mod/go.mod" "$mod/go.sum")" "$BIN/prometheus" &&
    fresh promtool "$(stamp_of promtool "$mod/go.mod" "$mod/go.sum")" "$BIN/promtool"; then
    record prometheus "up to date"
    record promtool "up to date"
    return
  fi
  # Only now (something is stale) is Go needed: the version comes from the module's VERSION file.
  need_go
  local v src ld
  src=$(cd "$here/prometheus" && go mod download github.com/prometheus/prometheus &&
    go list -m -f '{{.Dir}}' github.com/prometheus/prometheus) ||
    die "prometheus: the github.com/prometheus/prometheus module could not be downloaded (Go module proxy unreachable?)"
  v=$(cat "$src/VERSION") || die "prometheus: no VERSION file in $src"
  # The module has no git metadata: the revision, branch, user and date stay empty.
  ld="-s -w -X github.com/prometheus/common/version.Version=$v"
  go_build prometheus prometheus github.com/prometheus/prometheus/cmd/prometheus "$BIN/prometheus" \
    -tags=remove_all_sd -ldflags "$ld"
  go_build promtool prometheus github.com/prometheus/prometheus/cmd/promtool "$BIN/promtool" \
    -tags=remove_all_sd -ldflags "$ld"
}

t_all=$EPOCHREALTIME
# Prometheus compiles none of the others' packages (its dependencies are its own versions), so it
# builds alongside them: one `go build` leaves cores idle while it links and at the narrow ends of
# its package graph, which the other fills. Its log lines interleave with theirs (each names its
# component); its summary lines come back through a file. If a foreground build fails, this one
# still runs to its end under the same lock (its binary and stamp are written whole or not at all).
prom_pid='' prom_summary=''
if [ $want_prom = 1 ] && { [ $want_cp = 1 ] || [ $want_floor = 1 ] || [ $want_velero = 1 ] || [ $want_cm = 1 ]; }; then
  prom_summary=$(mktemp)
  (
    summary=() built=0
    build_prometheus
    printf '%s\n' "${summary[@]}" >"$prom_summary"
    [ $built = 0 ] || echo built >>"$prom_summary"
  ) &
  prom_pid=$!
elif [ $want_prom = 1 ]; then
  build_prometheus
fi
if [ $want_cp = 1 ]; then build_controlplane; fi
# The floor's kube-apiserver shares no compiled package with the v1.37 control plane either, but it
# builds after it, not alongside: two Kubernetes builds at once would double the peak memory
# (about 1 GB each while linking) for little gain on the few cores CI has.
if [ $want_floor = 1 ]; then build_floor; fi
if [ $want_velero = 1 ]; then build_velero; fi
if [ $want_cm = 1 ]; then build_certmanager; fi
if [ -n "$prom_pid" ]; then
  wait "$prom_pid" || {
    rm -f "$prom_summary"
    die "prometheus: its build failed (its output is above, lines naming prometheus or promtool)"
  }
  while IFS= read -r line; do
    if [ "$line" = built ]; then built=1; else summary+=("$line"); fi
  done <"$prom_summary"
  rm -f "$prom_summary"
fi
if [ $quiet = 0 ] || [ $built = 1 ]; then
  printf '[realcp-build] %s\n' "${summary[@]}" >&2
  log "done in $(secs "$t_all") s; cache: $CACHE"
fi
