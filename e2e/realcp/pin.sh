#!/usr/bin/env bash
# Regenerates the committed pins: e2e/realcp/{controlplane,controlplane-floor,kwok,velero,velero-aws,certmanager,prometheus}/go.mod
# + go.sum.
# Run it only to change a version (edit the variables below), then commit the go.mod/go.sum it
# leaves; build.sh never rewrites them. Needs Go and the Go module proxy.
#
# k8s.io/kubernetes is not meant to be a dependency: its go.mod requires its 31 staging modules
# (k8s.io/api, k8s.io/client-go, ...) at v0.0.0 and replaces them with ./staging/src/... paths,
# and replaces only count in the main module. So the tools module repeats each staging module as
# a replace to its published tag (v0.<minor>.<patch>), generated from kubernetes' own go.mod.
set -euo pipefail
K=v1.37.2 STAGING=v0.37.2 ETCD=v3.7.3 KWOK=v0.8.0
# The oldest Kubernetes restore-hooks supports (Chart.yaml kubeVersion; docs/install.md
# "Kubernetes versions"): its x.y.0, the strictest reading of ">=x.y.0-0". Only kube-apiserver.
FLOOR=v1.35.0 FLOOR_STAGING=v0.35.0
VELERO=v1.18.3 VELERO_AWS=v1.14.3
CERT_MANAGER=v1.21.2
# Prometheus 3.16.0: the module tags Prometheus v3.X.Y as v0.3XX.Y.
PROMETHEUS=v0.316.0
# Velero's go.mod replaces kopia with its fork; same main-module-only rule as above.
KOPIA_FORK=github.com/project-velero/kopia@v0.0.0-20251230033609-d946b1e75197
# Velero v1.18.3 asks for k8s.io/*@v0.33.12; v0.33.13 (same minor) is what the proxy serves here.
VELERO_K8S=v0.33.13

here=$(cd "$(dirname "$0")" && pwd)
command -v go >/dev/null || { echo "pin.sh: go is not on PATH" >&2; exit 2; }
export GOFLAGS=-mod=mod GOTOOLCHAIN=local

fresh() { # dir module-path: a go.mod with nothing but the module line and the go version
  rm -f "$1/go.mod" "$1/go.sum"
  (cd "$1" && go mod init "$2" >/dev/null 2>&1 && go mod edit -go=1.26.0)
}

staging_replaces() { # kubernetes-version staging-version: in the module of the current dir
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  go mod edit -json "$gomod" |
    python3 -c 'import json,sys; [print(r["Path"]) for r in json.load(sys.stdin)["Require"] if r["Version"] == "v0.0.0"]' |
    while read -r m; do go mod edit -replace="$m=$m@$2"; done
}

# kubernetes + etcd; the floor's kube-apiserver, kwok, Velero and the AWS plugin each in a module
# of their own (why: the comments in their tools.go).
cd "$here/controlplane"
fresh . restore-hooks.local/e2e/realcp/controlplane
staging_replaces "$K" "$STAGING"
go mod edit -require="k8s.io/kubernetes@$K" -require="go.etcd.io/etcd/server/v3@$ETCD"
go mod tidy

cd "$here/controlplane-floor"
fresh . restore-hooks.local/e2e/realcp/controlplane-floor
staging_replaces "$FLOOR" "$FLOOR_STAGING"
go mod edit -require="k8s.io/kubernetes@$FLOOR"
go mod tidy

cd "$here/kwok"
fresh . restore-hooks.local/e2e/realcp/kwok
go mod edit -require="sigs.k8s.io/kwok@$KWOK"
go mod tidy

cd "$here/velero"
fresh . restore-hooks.local/e2e/realcp/velero
go mod edit -replace="github.com/kopia/kopia=$KOPIA_FORK" -require="github.com/vmware-tanzu/velero@$VELERO"
for m in api apiextensions-apiserver apimachinery cli-runtime client-go kube-aggregator metrics; do
  go mod edit -require="k8s.io/$m@$VELERO_K8S"
done
go mod tidy

cd "$here/velero-aws"
fresh . restore-hooks.local/e2e/realcp/velero-aws
go mod edit -require="github.com/vmware-tanzu/velero-plugin-for-aws@$VELERO_AWS"
go mod tidy
# cert-manager: its own k8s.io v0.36 and controller-runtime, as it was released against; the
# module holds certmanager/main.go, which imports its pkg/ (see the header there).
cd "$here/certmanager"
fresh . restore-hooks.local/e2e/realcp/certmanager
go mod edit -require="github.com/cert-manager/cert-manager@$CERT_MANAGER"
go mod tidy
# Prometheus and promtool (one module): its own client libraries, as it was released against
# (see prometheus/tools.go).
cd "$here/prometheus"
fresh . restore-hooks.local/e2e/realcp/prometheus
go mod edit -require="github.com/prometheus/prometheus@$PROMETHEUS"
go mod tidy
echo "pin.sh: done; check with: git status -- e2e/realcp"
