#!/usr/bin/env bash
# The chart's RBAC, aggregated roles and ValidatingAdmissionPolicies on a REAL kube-apiserver
# (etcd + kube-apiserver + a kube-controller-manager running only the clusterrole-aggregation,
# validatingadmissionpolicy-status, garbage-collector and namespace controllers), all on
# 127.0.0.1 in a temporary directory, stopped on exit. Not part of .ci/chart-checks.sh: it needs
# the binaries e2e/realcp/build.sh builds (Kubernetes 1.37; the pinned kubectl among them) and
# takes about a minute.
#
#   .ci/chart-apiserver-checks.sh [--emulated-version 1.35 | --floor]
#
# --floor: on the real kube-apiserver of the oldest supported Kubernetes (bin/kube-apiserver-floor,
# e2e/realcp/controlplane-floor; what the chart's kubeVersion claims), the controller-manager
# emulating its minor, the chart rendered for its version.
#
# Renders the chart with ci/split-values.yaml and otherwise default values, --velero-hooks defer
# included (both ServiceAccounts and all four policies exist: the Velero Restore one is rendered
# in both modes, and chart_assertions.py checks that the policies are identical under own), applies
# everything but the cert-manager and prometheus-operator objects (and then removes the
# MutatingWebhookConfiguration: no webhook runs here, the policies are under test), and checks:
# - the four policies are accepted with no type-checking warnings, the Velero one before Velero's
#   Restore CRD exists and again after (re-created against the CRD's schema);
# - hook-authors: a RestoreHook/ClusterRestoreHook author without create pods/exec (in the
#   namespace / cluster-wide) is refused with the message naming the user and the permission;
#   spec-preserving updates, status patches and foreground deletion pass; an image hook whose env or
#   envFrom names a Secret or ConfigMap the author may not get (by name, in the namespace /
#   cluster-wide) is refused naming it and the user, once granted allowed; 16 names in one object
#   pass (the cost budget), 17 are refused;
# - pod-hook-state: every add/remove/change of a restore-hooks.dev/* pod annotation or label by
#   anyone but the controller is refused, naming the keys, through the pod and through
#   pods/status; other pod metadata changes pass; a Binding (pods/binding or bindings) carrying a
#   restore-hooks.dev/* annotation or label is refused, a plain one passes; a pod created with
#   plan/status/exec-label state outside every restore scope is refused (naming the keys), inside
#   a pod-label or a namespace-label scope it passes, and restore-hooks.dev/injected alone passes;
#   in a restore scope, a pod created with a plan "allowedBy":"creator" by a user without create
#   pods/exec in its namespace is refused (naming the pod and the user), by one with it (a Role, or
#   admin) allowed; "allowedBy":"velero" by anyone but Velero's ServiceAccount (impersonated) is
#   refused, by it allowed; plans allowed by a hook object or without allowedBy pass for anyone;
# - velero-restore-hook-authors (under the default --velero-hooks defer): a Velero Restore with
#   hooks by a user without cluster-wide create pods/exec is refused, by one with it allowed;
#   without hooks, in another namespace, and status/label-only updates pass; changing spec.hooks
#   is checked;
# - namespace-labels: the controller may set and remove the restore-namespace label and its
#   annotation on a namespace (a bare merge PATCH, as the binary sends it), not another label or
#   annotation (the refusal names the key and the user); others are not constrained;
# - RBAC (kubectl auth can-i) of both ServiceAccounts (the webhook's may create
#   SubjectAccessReviews and get one namespace, the split controller's may not), of view/edit, and of the single
#   ServiceAccount of a split.enabled=false render (ci/single-process-values.yaml, RBAC objects
#   only, as release rh-single: its RBAC differs from split's; its veleroHooks own changes no RBAC
#   and no policy); Secrets list/watch only with the plan-key name selector.
# - helm install, upgrade, uninstall (release rh-up): the CRDs are release objects; existing ones
#   without Helm's metadata are refused, adopted as docs/install.md "Upgrading" says; a helm
#   upgrade that changes a CRD's schema is served by the API server; uninstall keeps the CRDs; the
#   pre-delete hook's `restore-hooks remove-webhook` (target/debug/restore-hooks, when built) under
#   exactly the hook's RBAC deletes this release's webhook configuration and no other.
# Exit 0: all passed; 1: a check failed; 2: the binaries are missing.
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${RESTORE_HOOKS_REALCP_CACHE:-$HOME/.cache/restore-hooks-realcp}"
BIN="$CACHE/bin"
HELM="${HELM:-$ROOT/.tools/helm/helm}"
EMULATE="" APISERVER=kube-apiserver KUBE_VERSION=1.35.0
case "${1:-}" in
--emulated-version) EMULATE="${2:?version, e.g. 1.35}" ;;
--floor) APISERVER=kube-apiserver-floor ;;
"") ;;
*) echo "chart-apiserver-checks: unknown argument '$1' (usage: [--emulated-version X.Y | --floor])" >&2; exit 2 ;;
esac
for b in etcd "$APISERVER" kube-controller-manager kubectl; do
  [ -x "$BIN/$b" ] || { echo "chart-apiserver-checks: $BIN/$b missing: run e2e/realcp/build.sh controlplane floor" >&2; exit 2; }
done
if [ "$APISERVER" = kube-apiserver-floor ]; then
  # "Kubernetes v1.35.0": render for that version; the controller-manager (v1.37) emulates its minor.
  KUBE_VERSION=$("$BIN/$APISERVER" --version | sed -n 's/^Kubernetes v\([0-9]*\.[0-9]*\.[0-9]*\)$/\1/p')
  [ -n "$KUBE_VERSION" ] || { echo "chart-apiserver-checks: $BIN/$APISERVER --version is not 'Kubernetes vX.Y.Z'" >&2; exit 2; }
fi
[ -x "$HELM" ] || { echo "chart-apiserver-checks: $HELM missing: run .ci/install-tools.sh" >&2; exit 2; }
K="$BIN/kubectl"
W="$(mktemp -d)"
PIDS=()
cleanup() { # newest first (controller-manager, apiserver, etcd); whatever is left after 5 s is killed
  local i
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill "${PIDS[i]}" 2>/dev/null; done
  for _ in $(seq 50); do kill -0 "${PIDS[@]}" 2>/dev/null || break; sleep 0.1; done
  kill -9 "${PIDS[@]}" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT
fp() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# --- control plane -------------------------------------------------------------------------------
P="$W/pki"; mkdir -p "$P"
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$P/ca.key" -out "$P/ca.crt" -days 1 -subj /CN=chart-check-ca 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout "$P/apiserver.key" -out "$P/apiserver.csr" -subj /CN=kube-apiserver 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$P/ext"
openssl x509 -req -in "$P/apiserver.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial -out "$P/apiserver.crt" \
  -days 1 -extfile "$P/ext" 2>/dev/null
openssl genrsa -out "$P/sa.key" 2048 2>/dev/null; openssl rsa -in "$P/sa.key" -pubout -out "$P/sa.pub" 2>/dev/null
echo 'admintoken,admin,admin,"system:masters"' >"$P/tokens.csv"
EC=$(fp); EP=$(fp); AP=$(fp)
emu=(); [ -n "$EMULATE" ] && emu=("--emulated-version=kube=$EMULATE")
kcm_emu=("${emu[@]}"); [ "$APISERVER" = kube-apiserver-floor ] && kcm_emu=("--emulated-version=kube=${KUBE_VERSION%.*}")
"$BIN/etcd" --name=n0 --data-dir="$W/etcd" --listen-client-urls="http://127.0.0.1:$EC" --advertise-client-urls="http://127.0.0.1:$EC" \
  --listen-peer-urls="http://127.0.0.1:$EP" --initial-advertise-peer-urls="http://127.0.0.1:$EP" \
  --initial-cluster="n0=http://127.0.0.1:$EP" --unsafe-no-fsync=true >"$W/etcd.log" 2>&1 & PIDS+=($!)
"$BIN/$APISERVER" --etcd-servers="http://127.0.0.1:$EC" --bind-address=127.0.0.1 --advertise-address=127.0.0.1 \
  --secure-port="$AP" --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" --client-ca-file="$P/ca.crt" \
  --token-auth-file="$P/tokens.csv" --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" --service-cluster-ip-range=10.0.0.0/24 \
  --authorization-mode=Node,RBAC --endpoint-reconciler-type=none "${emu[@]}" >"$W/apiserver.log" 2>&1 & PIDS+=($!)
export KUBECONFIG="$W/admin.kubeconfig"
cat >"$KUBECONFIG" <<KC
apiVersion: v1
kind: Config
clusters: [{name: t, cluster: {server: "https://127.0.0.1:$AP", certificate-authority: "$P/ca.crt"}}]
users: [{name: admin, user: {token: admintoken}}]
contexts: [{name: t, context: {cluster: t, user: admin}}]
current-context: t
KC
for _ in $(seq 120); do "$K" get --raw /readyz >/dev/null 2>&1 && break; sleep 0.5; done
"$K" get --raw /readyz >/dev/null 2>&1 || { tail -20 "$W/apiserver.log" >&2; exit 1; }
"$BIN/kube-controller-manager" --kubeconfig="$KUBECONFIG" --authentication-kubeconfig="$KUBECONFIG" \
  --authorization-kubeconfig="$KUBECONFIG" --bind-address=127.0.0.1 --secure-port="$(fp)" --leader-elect=false \
  --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" --use-service-account-credentials=false "${kcm_emu[@]}" \
  --controllers=clusterrole-aggregation-controller,validatingadmissionpolicy-status-controller,garbage-collector-controller,namespace-controller \
  >"$W/kcm.log" 2>&1 & PIDS+=($!)
echo "==> kube-apiserver $("$K" version -o json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])')${EMULATE:+ emulating $EMULATE} on 127.0.0.1:$AP"

# --- the chart -----------------------------------------------------------------------------------
# The split render (the default mode, with ci/split-values.yaml's names) with the default
# veleroHooks defer, which renders all three policies, the Velero Restore one included; and the
# RBAC objects of a single-process render (another release).
"$HELM" template restore-hooks "$ROOT/charts/restore-hooks" -n restore-hooks --include-crds --no-hooks --kube-version "$KUBE_VERSION" \
  --api-versions cert-manager.io/v1 --api-versions monitoring.coreos.com/v1 -f "$ROOT/charts/restore-hooks/ci/split-values.yaml" \
  >"$W/render.yaml" || exit 1
"$HELM" template rh-single "$ROOT/charts/restore-hooks" -n rh-single --no-hooks --kube-version "$KUBE_VERSION" \
  -f "$ROOT/charts/restore-hooks/ci/single-process-values.yaml" >"$W/render-single.yaml" || exit 1
python3 - "$W" <<'PY'
import sys, yaml
w = sys.argv[1]
docs = [d for d in yaml.safe_load_all(open(f"{w}/render.yaml")) if d]
skip = {"Certificate", "Issuer", "ServiceMonitor", "PrometheusRule"}
yaml.safe_dump_all([d for d in docs if d["kind"] == "CustomResourceDefinition"], open(f"{w}/crds.yaml", "w"))
yaml.safe_dump_all([d for d in docs if d["kind"] not in skip | {"CustomResourceDefinition"}], open(f"{w}/rest.yaml", "w"))
rbac = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
single = [d for d in yaml.safe_load_all(open(f"{w}/render-single.yaml")) if d]
yaml.safe_dump_all([d for d in single if d["kind"] in rbac], open(f"{w}/single-rbac.yaml", "w"))
PY
"$K" create namespace restore-hooks >/dev/null; "$K" create namespace rh-single >/dev/null
"$K" apply --server-side -f "$W/crds.yaml" >/dev/null && "$K" wait --for=condition=Established crd --all --timeout=30s >/dev/null \
  && "$K" apply --server-side -f "$W/rest.yaml" >"$W/apply.log" 2>&1 \
  && "$K" apply --server-side -f "$W/single-rbac.yaml" >>"$W/apply.log" 2>&1 \
  || { echo "  FAIL  the API server refused the chart's objects:" >&2; sed 's/^/        /' "$W/apply.log" >&2; exit 1; }
echo "  ok    the API server accepts every object of the split render (veleroHooks defer) and the single-process RBAC"
# No webhook server runs here: with failurePolicy Fail its configuration would refuse every pod
# created in a restore scope. The policies, not the webhook, are under test.
"$K" delete mutatingwebhookconfiguration restore-hooks >/dev/null

# The names ci/split-values.yaml gives.
CTRL=system:serviceaccount:restore-hooks:restore-hooks
WH=system:serviceaccount:restore-hooks:restore-hooks-admission
PASS=1 FAIL=0 # the apply above
ok() { echo "  ok    $*"; PASS=$((PASS+1)); }
no() { echo "  FAIL  $*"; FAIL=$((FAIL+1)); }
expect_ok() { local what="$1"; shift; if out=$("$@" 2>&1); then ok "$what"; else no "$what: $out"; fi; }
expect_deny() { # what wanted-message command...
  local what="$1" want="$2"; shift 2
  if out=$("$@" 2>&1); then no "$what: allowed, want denied"
  elif grep -qF -- "$want" <<<"$out"; then ok "$what"; [ -n "${VERBOSE:-}" ] && echo "        $out"
  else no "$what: denied without '$want': $out"; fi
}
can() { local who="$1" want="$2"; shift 2; got=$($K auth can-i --as="$who" "$@" 2>/dev/null); [ "$got" = "$want" ] && ok "can-i $who $* = $want" || no "can-i $who $* = $got, want $want"; }

typecheck() { # NOTE policies...: each must have been type-checked (status.observedGeneration) with no warnings
  local note="$1"; shift
  for _ in $(seq 60); do
    n=$($K get validatingadmissionpolicies "$@" -o json | python3 -c 'import json,sys; d=json.load(sys.stdin); items=d.get("items", [d]); print(sum(1 for i in items if (i.get("status") or {}).get("observedGeneration") == i["metadata"]["generation"]))')
    [ "$n" = $# ] && break; sleep 0.5
  done
  $K get validatingadmissionpolicies "$@" -o json | python3 -c '
import json, sys
d = json.load(sys.stdin)
for i in d.get("items", [d]):
    st = i.get("status") or {}
    warn = (st.get("typeChecking") or {}).get("expressionWarnings") or []
    ok = st.get("observedGeneration") == i["metadata"]["generation"] and not warn and not st.get("conditions", [])
    print(("  ok    " if ok else "  FAIL  ") + i["metadata"]["name"] + (": type-checked, no warnings" if ok else f": {st}") + sys.argv[1])
' "$note" | tee "$W/tc.log"
  PASS=$((PASS + $(grep -c '^  ok' "$W/tc.log"))); FAIL=$((FAIL + $(grep -c '^  FAIL' "$W/tc.log")))
}
POLICIES=(restore-hooks-hook-authors restore-hooks-pod-hook-state restore-hooks-velero-restore-hook-authors
  restore-hooks-namespace-labels)
echo "== the policies compile and type-check"
# The policies below are those of the default --velero-hooks defer render.
expect_ok "both Deployments run --velero-hooks=defer (the default), not own" \
  sh -c "[ \$(grep -c -- '--velero-hooks=defer\"' '$W/render.yaml') = 2 ] && ! grep -q -- '--velero-hooks=own' '$W/render.yaml'"
typecheck " (Velero's CRDs not installed)" "${POLICIES[@]}"

$K create namespace shop >/dev/null 2>&1; $K create namespace other >/dev/null 2>&1
for ns in shop other; do $K -n $ns create serviceaccount default >/dev/null 2>&1; done
$K apply -f - >/dev/null <<'Y'
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: hook-writer, namespace: shop}
rules:
- {apiGroups: [restore-hooks.dev], resources: [restorehooks, restorehooks/status], verbs: [get, list, create, update, patch, delete]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: exec, namespace: shop}
rules:
- {apiGroups: [""], resources: [pods/exec], verbs: [get, create]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-hooks, namespace: shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: hook-writer}
subjects: [{kind: User, name: alice}, {kind: User, name: bob}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bob-exec, namespace: shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: exec}
subjects: [{kind: User, name: bob}, {kind: User, name: carol}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: crh-writer}
rules:
- {apiGroups: [restore-hooks.dev], resources: [clusterrestorehooks], verbs: [get, list, create, update, patch]}
- {apiGroups: [""], resources: [pods/exec], verbs: [get, create]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: crh-writer-noexec}
rules:
- {apiGroups: [restore-hooks.dev], resources: [clusterrestorehooks], verbs: [get, list, create, update, patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: dave-crh}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: crh-writer}
subjects: [{kind: User, name: dave}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: carol-crh}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: crh-writer-noexec}
subjects: [{kind: User, name: carol}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: erin-edit, namespace: shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}
subjects: [{kind: User, name: erin}, {kind: User, name: vic}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: debug, namespace: shop}
rules:
- {apiGroups: [""], resources: [pods/ephemeralcontainers], verbs: [update, patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: frank-hooks, namespace: shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: hook-writer}
subjects: [{kind: User, name: frank}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: frank-exec, namespace: shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: exec}
subjects: [{kind: User, name: frank}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: frank-debug, namespace: shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: debug}
subjects: [{kind: User, name: frank}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: vic-view, namespace: other}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects: [{kind: User, name: vic}]
Y
$K -n shop delete restorehook pg --ignore-not-found >/dev/null; $K delete clusterrestorehook all-pg --ignore-not-found >/dev/null
RH='{"apiVersion":"restore-hooks.dev/v1alpha1","kind":"RestoreHook","metadata":{"name":"pg","namespace":"shop"},"spec":{"postHooks":[{"exec":{"command":["true"]}}]}}'
CRH='{"apiVersion":"restore-hooks.dev/v1alpha1","kind":"ClusterRestoreHook","metadata":{"name":"all-pg"},"spec":{"postHooks":[{"exec":{"command":["true"]}}]}}'

echo "== the CRD schemas refuse definitions that could never work (as an admin: the schema, not a policy)"
rh() { printf '{"apiVersion":"restore-hooks.dev/v1alpha1","kind":"RestoreHook","metadata":{"name":"bad","namespace":"shop"},"spec":%s}' "$1"; }
expect_deny "selector operator 'in' (lowercase)" 'Unsupported value: "in"' \
  $K create -f - <<<"$(rh '{"labelSelector":{"matchExpressions":[{"key":"app","operator":"in","values":["db"]}]},"postHooks":[{"exec":{"command":["true"]}}]}')"
expect_deny "In without values" "In and NotIn need at least one value" \
  $K create -f - <<<"$(rh '{"labelSelector":{"matchExpressions":[{"key":"app","operator":"In"}]},"postHooks":[{"exec":{"command":["true"]}}]}')"
expect_deny "Exists with values" "Exists and DoesNotExist take none" \
  $K create -f - <<<"$(rh '{"labelSelector":{"matchExpressions":[{"key":"app","operator":"Exists","values":["x"]}]},"postHooks":[{"exec":{"command":["true"]}}]}')"
expect_deny "a postHooks entry with neither init nor exec" "each postHooks entry needs init or exec" \
  $K create -f - <<<"$(rh '{"postHooks":[{}]}')"
expect_deny "onError fail (lowercase)" 'Unsupported value: "fail"' \
  $K create -f - <<<"$(rh '{"postHooks":[{"exec":{"command":["true"],"onError":"fail"}}]}')"
expect_deny "execTimeout 1d" "execTimeout" \
  $K create -f - <<<"$(rh '{"postHooks":[{"exec":{"command":["true"],"execTimeout":"1d"}}]}')"
expect_deny "a 40 KiB command argument" "Too long" \
  $K create -f - <<<"$(rh "{\"postHooks\":[{\"exec\":{\"command\":[\"$(head -c 40960 /dev/zero | tr '\0' x)\"]}}]}")"
expect_deny "an init container without image" "image" \
  $K create -f - <<<"$(rh '{"postHooks":[{"init":{"initContainers":[{"name":"a"}]}}]}')"
expect_deny "an after entry with an empty hook name" "hook" \
  $K create -f - <<<"$(rh '{"postHooks":[{"exec":{"command":["true"],"after":[{"hook":""}]}}]}')"

echo "== hook authors need exec"
expect_deny "alice (no exec) creates RestoreHook shop/pg" "creating RestoreHook shop/pg needs permission to create pods/exec in namespace shop" \
  $K create --as=alice -f - <<<"$RH"
expect_ok "bob (exec in shop) creates RestoreHook shop/pg" $K create --as=bob -f - <<<"$RH"
expect_deny "alice changes its spec" "updating RestoreHook shop/pg needs permission" \
  $K --as=alice -n shop patch restorehook pg --type=merge -p '{"spec":{"postHooks":[{"exec":{"command":["false"]}}]}}'
expect_ok "alice changes only a label (spec unchanged)" $K --as=alice -n shop label restorehook pg team=db
expect_ok "alice patches the status subresource (not matched)" $K --as=alice -n shop patch restorehook pg --subresource=status --type=merge -p '{"status":{"podsPlanned":1}}'
expect_ok "bob changes its spec" $K --as=bob -n shop patch restorehook pg --type=merge -p '{"spec":{"postHooks":[{"exec":{"command":["false"]}}]}}'
expect_ok "erin (edit, aggregated) creates RestoreHook shop/pg2" $K create --as=erin -f - <<<"${RH/\"pg\"/\"pg2\"}"
expect_deny "carol (exec in shop only) creates a ClusterRestoreHook" "creating ClusterRestoreHook all-pg needs permission to create pods/exec cluster-wide" \
  $K create --as=carol -f - <<<"$CRH"
expect_ok "dave (exec cluster-wide) creates a ClusterRestoreHook" $K create --as=dave -f - <<<"$CRH"
IMG='{"apiVersion":"restore-hooks.dev/v1alpha1","kind":"RestoreHook","metadata":{"name":"distroless","namespace":"shop"},"spec":{"postHooks":[{"exec":{"container":"api","image":"busybox:1.36","command":["/bin/true"]}}]}}'
expect_deny "bob (exec, no pods/ephemeralcontainers) creates a RestoreHook with an image" \
  "creating RestoreHook shop/distroless: a hook with an image needs permission to update pods/ephemeralcontainers in namespace shop (restore-hooks adds an ephemeral container of that image to the pods it selects); user bob lacks it" \
  $K create --as=bob -f - <<<"$IMG"
expect_ok "frank (exec and pods/ephemeralcontainers in shop) creates it" $K create --as=frank -f - <<<"$IMG"
expect_deny "dave (exec cluster-wide, no pods/ephemeralcontainers) creates a ClusterRestoreHook with an image" \
  "ClusterRestoreHook img: a hook with an image needs permission to update pods/ephemeralcontainers cluster-wide" \
  $K create --as=dave -f - <<<'{"apiVersion":"restore-hooks.dev/v1alpha1","kind":"ClusterRestoreHook","metadata":{"name":"img"},"spec":{"postHooks":[{"exec":{"image":"busybox:1.36","command":["/bin/true"]}}]}}'
expect_deny "bob creates a RestoreHook whose exec hook waits for itself (after)" \
  "an exec hook names self-wait in after, so it would wait for itself" \
  $K create --as=bob -f - <<<'{"apiVersion":"restore-hooks.dev/v1alpha1","kind":"RestoreHook","metadata":{"name":"self-wait","namespace":"shop"},"spec":{"postHooks":[{"exec":{"command":["true"]}},{"exec":{"command":["true"],"after":[{"hook":"db"},{"hook":"self-wait"}]}}]}}'
expect_ok "bob creates a RestoreHook that waits for another hook (after)" \
  $K create --as=bob -f - <<<'{"apiVersion":"restore-hooks.dev/v1alpha1","kind":"RestoreHook","metadata":{"name":"waits","namespace":"shop"},"spec":{"postHooks":[{"exec":{"command":["true"],"after":[{"hook":"db"}]}}]}}'
expect_deny "dave creates a ClusterRestoreHook that waits for itself" \
  "an exec hook names self-wait in after" \
  $K create --as=dave -f - <<<'{"apiVersion":"restore-hooks.dev/v1alpha1","kind":"ClusterRestoreHook","metadata":{"name":"self-wait"},"spec":{"postHooks":[{"exec":{"command":["true"],"after":[{"hook":"self-wait"}]}}]}}'
expect_deny "carol changes its spec" "updating ClusterRestoreHook all-pg needs" \
  $K --as=carol patch clusterrestorehook all-pg --type=merge -p '{"spec":{"postHooks":[{"exec":{"command":["false"]}}]}}'
echo "== hook authors need get on each Secret and ConfigMap an image hook's env and envFrom name"
$K -n shop create secret generic db-creds --from-literal=password=s3cret >/dev/null
$K -n shop create configmap db-config --from-literal=host=db >/dev/null
ENV='{"apiVersion":"restore-hooks.dev/v1alpha1","kind":"RestoreHook","metadata":{"name":"migrate","namespace":"shop"},"spec":{"postHooks":[{"exec":{"container":"api","image":"busybox:1.36","command":["/bin/true"],"env":[{"name":"PGPASSWORD","valueFrom":{"secretKeyRef":{"name":"db-creds","key":"password"}}}]}}]}}'
can frank no get secrets/db-creds -n shop
expect_deny "frank (exec and debug in shop, not get Secret db-creds) creates a RestoreHook whose env reads it" \
  "creating RestoreHook shop/migrate: a hook whose env or envFrom names secrets/db-creds needs permission to get it in namespace shop (restore-hooks' ephemeral container reads it into its environment); user frank lacks it" \
  $K create --as=frank -f - <<<"$ENV"
$K apply -f - >/dev/null <<'Y'
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: db-creds-reader}
rules:
- {apiGroups: [""], resources: [secrets], resourceNames: [db-creds], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: frank-db-creds, namespace: shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: db-creds-reader}
subjects: [{kind: User, name: frank}, {kind: User, name: hank}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: debug-everywhere}
rules:
- {apiGroups: [""], resources: [pods/ephemeralcontainers], verbs: [update, patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: hank-crh}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: crh-writer}
subjects: [{kind: User, name: hank}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: hank-debug}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: debug-everywhere}
subjects: [{kind: User, name: hank}]
Y
can frank yes get secrets/db-creds -n shop
can frank no get secrets/other -n shop
expect_ok "frank, once he may get Secret db-creds (by name), creates it" $K create --as=frank -f - <<<"$ENV"
expect_deny "frank adds an envFrom of ConfigMap db-config, which he may not get" \
  "updating RestoreHook shop/migrate: a hook whose env or envFrom names configmaps/db-config needs permission to get it in namespace shop" \
  $K --as=frank -n shop patch restorehook migrate --type=json -p '[{"op":"add","path":"/spec/postHooks/0/exec/envFrom","value":[{"configMapRef":{"name":"db-config"}}]}]'
expect_deny "frank adds an env configMapKeyRef to another hook (a second exec hook)" "names configmaps/db-config" \
  $K --as=frank -n shop patch restorehook migrate --type=json -p '[{"op":"add","path":"/spec/postHooks/-","value":{"exec":{"image":"busybox:1.36","command":["/bin/true"],"env":[{"name":"H","valueFrom":{"configMapKeyRef":{"name":"db-config","key":"host"}}}]}}}]'
expect_deny "frank adds an envFrom of Secret other" "names secrets/other needs permission to get it in namespace shop" \
  $K --as=frank -n shop patch restorehook migrate --type=json -p '[{"op":"add","path":"/spec/postHooks/0/exec/envFrom","value":[{"prefix":"X_","secretRef":{"name":"other"}}]}]'
expect_ok "frank adds copyTargetEnv and a fieldRef (values the pod has: no more permission)" \
  $K --as=frank -n shop patch restorehook migrate --type=json -p '[{"op":"add","path":"/spec/postHooks/0/exec/copyTargetEnv","value":true},{"op":"add","path":"/spec/postHooks/0/exec/env/-","value":{"name":"POD","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}}}]'
# The schema lets these references be null, which CEL's has() does not tell from set.
expect_ok "frank names db-creds again, in envFrom with a null configMapRef, in env with null siblings" \
  $K --as=frank -n shop patch restorehook migrate --type=json -p '[{"op":"add","path":"/spec/postHooks/0/exec/envFrom","value":[{"secretRef":{"name":"db-creds"},"configMapRef":null}]},{"op":"add","path":"/spec/postHooks/0/exec/env/-","value":{"name":"N","value":"x","valueFrom":null}},{"op":"add","path":"/spec/postHooks/0/exec/env/-","value":{"name":"P","valueFrom":{"secretKeyRef":{"name":"db-creds","key":"password"},"configMapKeyRef":null,"fieldRef":null}}}]'
refs() { # N: a RestoreHook whose env names Secrets s0..s(N-1)
  python3 -c 'import json,sys; n=int(sys.argv[1]); print(json.dumps({"apiVersion":"restore-hooks.dev/v1alpha1","kind":"RestoreHook","metadata":{"name":f"refs-{n}","namespace":"shop"},"spec":{"postHooks":[{"exec":{"image":"busybox:1.36","command":["/bin/true"],"env":[{"name":f"V{i}","valueFrom":{"secretKeyRef":{"name":f"s{i}","key":"k"}}} for i in range(n)]}}]}}))' "$1"
}
# 16 names: each is one authorization check (18 with pods/exec and pods/ephemeralcontainers),
# within the API server's cost budget for one policy.
expect_ok "admin names 16 Secrets in one RestoreHook" $K create -f - <<<"$(refs 16)"
expect_deny "admin names 17" "the hooks' env and envFrom name 17 Secrets and ConfigMaps; at most 16 may be named in one hook object" \
  $K create -f - <<<"$(refs 17)"
CENV='{"apiVersion":"restore-hooks.dev/v1alpha1","kind":"ClusterRestoreHook","metadata":{"name":"migrate-all"},"spec":{"postHooks":[{"exec":{"image":"busybox:1.36","command":["/bin/true"],"envFrom":[{"secretRef":{"name":"db-creds"}}]}}]}}'
can hank yes get secrets/db-creds -n shop
can hank no get secrets/db-creds -A
expect_deny "hank (exec and debug cluster-wide, get Secret db-creds in shop only) creates a ClusterRestoreHook whose envFrom reads it" \
  "creating ClusterRestoreHook migrate-all: a hook whose env or envFrom names secrets/db-creds needs permission to get it cluster-wide (restore-hooks' ephemeral container reads it into its environment); user hank lacks it" \
  $K create --as=hank -f - <<<"$CENV"
$K create clusterrolebinding hank-db-creds --clusterrole=db-creds-reader --user=hank >/dev/null
can hank yes get secrets/db-creds -A
expect_ok "hank, once he may get Secret db-creds cluster-wide, creates it" $K create --as=hank -f - <<<"$CENV"
# A bare merge PATCH of /status, as the binary sends it (kubectl patch GETs the subresource first).
rawpatch() { # as path body
  local srv tok; srv=$($K config view --minify -o jsonpath='{.clusters[0].cluster.server}')
  curl -sS -f -o /dev/null --cacert "$(dirname "$KUBECONFIG")/pki/ca.crt" -H "Authorization: Bearer admintoken" \
    -H "Impersonate-User: $1" -H 'Content-Type: application/merge-patch+json' -X PATCH "$srv$2" -d "$3" 2>&1 || { echo "PATCH $2 as $1 failed"; return 1; }
}
expect_ok "controller merge-patches RestoreHook status (patch only)" rawpatch $CTRL /apis/restore-hooks.dev/v1alpha1/namespaces/shop/restorehooks/pg/status '{"status":{"podsPlanned":2}}'
expect_ok "webhook merge-patches ClusterRestoreHook status (patch only)" rawpatch $WH /apis/restore-hooks.dev/v1alpha1/clusterrestorehooks/all-pg/status '{"status":{"podsPlanned":2}}'
# The garbage collector finds a new custom resource at its next discovery (every 30 s), then
# removes the foregroundDeletion finalizer: an UPDATE that leaves the spec alone, so not checked.
expect_ok "kubectl delete --cascade=foreground (the garbage collector removes the finalizer)" \
  $K --as=bob -n shop delete restorehook pg2 --cascade=foreground --timeout=90s

echo "== pod hook state"
$K -n shop delete pod db --ignore-not-found --grace-period=0 --force >/dev/null 2>&1
# In a restore scope (the pod label): created with hook state, as the webhook would leave it.
expect_ok "admin creates pod shop/db with hook state in a pod-label scope" $K apply -f - <<'Y'
apiVersion: v1
kind: Pod
metadata:
  name: db
  namespace: shop
  labels: {app: db, velero.io/restore-name: r1, restore-hooks.dev/exec: done, restore-hooks.dev/restore-run: r1}
  annotations: {restore-hooks.dev/plan: '{"hooks":[]}', restore-hooks.dev/status: '{"hooks":[{"phase":"Succeeded"}]}', other/note: x}
spec:
  containers: [{name: db, image: busybox}]
Y
expect_deny "admin resets restore-hooks.dev/exec=done to pending" "label restore-hooks.dev/exec: only the restore-hooks controller" \
  $K -n shop label pod db restore-hooks.dev/exec=pending --overwrite
expect_deny "admin removes the exec label" "label restore-hooks.dev/exec" $K -n shop label pod db restore-hooks.dev/exec-
expect_deny "admin removes the status annotation" "annotation restore-hooks.dev/status" $K -n shop annotate pod db restore-hooks.dev/status-
expect_deny "admin changes the status annotation" "annotation restore-hooks.dev/status" $K -n shop annotate pod db restore-hooks.dev/status='{"hooks":[]}' --overwrite
expect_deny "admin adds a restore-hooks.dev annotation" "annotation restore-hooks.dev/extra" $K -n shop annotate pod db restore-hooks.dev/extra=1
expect_deny "admin adds a restore-hooks.dev label" "label restore-hooks.dev/new" $K -n shop label pod db restore-hooks.dev/new=1
expect_deny "two changes are both named" "annotation restore-hooks.dev/status, label restore-hooks.dev/exec" \
  $K -n shop patch pod db --type=merge -p '{"metadata":{"labels":{"restore-hooks.dev/exec":"pending"},"annotations":{"restore-hooks.dev/status":null}}}'
expect_ok "admin changes another label" $K -n shop label pod db app=db2 --overwrite
expect_ok "admin changes another annotation" $K -n shop annotate pod db other/note=y --overwrite
expect_ok "same value written again (no change)" $K -n shop label pod db restore-hooks.dev/exec=done --overwrite
expect_ok "controller changes the exec label" $K --as=$CTRL -n shop label pod db restore-hooks.dev/exec=failed --overwrite
expect_ok "controller merge-patches a pod's exec label" rawpatch $CTRL /api/v1/namespaces/shop/pods/db '{"metadata":{"labels":{"restore-hooks.dev/exec":"done"}}}'
expect_deny "webhook SA merge-patches a pod (RBAC)" "failed" rawpatch $WH /api/v1/namespaces/shop/pods/db '{"metadata":{"labels":{"x":"1"}}}'
expect_ok "controller changes the status annotation" $K --as=$CTRL -n shop annotate pod db restore-hooks.dev/status='{"hooks":[]}' --overwrite
expect_deny "the webhook SA may not patch pods at all (RBAC)" "forbidden" $K --as=$WH -n shop label pod db x=1

echo "== pod hook state through pods/status (it accepts label and annotation changes too)"
expect_deny "admin resets the exec label through pods/status" "pod shop/db (status subresource): label restore-hooks.dev/exec: only the restore-hooks controller" \
  $K -n shop patch pod db --subresource=status --type=merge -p '{"metadata":{"labels":{"restore-hooks.dev/exec":"pending"}}}'
expect_deny "admin removes the status annotation through pods/status" "annotation restore-hooks.dev/status" \
  $K -n shop patch pod db --subresource=status --type=merge -p '{"metadata":{"annotations":{"restore-hooks.dev/status":null}}}'
expect_ok "admin changes another label through pods/status" \
  $K -n shop patch pod db --subresource=status --type=merge -p '{"metadata":{"labels":{"app":"db3"}}}'
expect_ok "a status-only write (as the kubelet's) passes" \
  $K -n shop patch pod db --subresource=status --type=merge -p '{"status":{"message":"restored"}}'
# The chart grants the controller no pods/status: system:masters supplies the RBAC, the username is
# the controller's, and the policy's exemption is by username.
expect_ok "the controller's username changes the exec label through pods/status" \
  $K --as=$CTRL --as-group=system:masters -n shop patch pod db --subresource=status --type=merge -p '{"metadata":{"labels":{"restore-hooks.dev/exec":"done"}}}'
expect_ok "  ... and it took effect (restore-hooks.dev/exec=done)" \
  test "$($K -n shop get pod db -o jsonpath='{.metadata.labels.restore-hooks\.dev/exec}')" = done

echo "== Bindings (the API server copies a Binding's annotations and labels onto the pod)"
$K -n shop delete pod unbound --ignore-not-found --grace-period=0 --force >/dev/null 2>&1
expect_ok "admin creates pod shop/unbound (no node, no hook state)" \
  $K -n shop run unbound --image=busybox --restart=Never
binding() { # name annotations-json labels-json
  printf '{"apiVersion":"v1","kind":"Binding","metadata":{"name":"%s","namespace":"shop","annotations":%s,"labels":%s},"target":{"apiVersion":"v1","kind":"Node","name":"n1"}}' "$1" "$2" "$3"
}
expect_deny "admin binds it with a restore-hooks.dev annotation (pods/binding)" \
  "binding pod shop/unbound: annotation restore-hooks.dev/status: a Binding copies its annotations and labels onto the pod" \
  $K create --raw /api/v1/namespaces/shop/pods/unbound/binding -f - <<<"$(binding unbound '{"restore-hooks.dev/status":"{}"}' '{}')"
expect_deny "admin binds it with a restore-hooks.dev label (pods/binding)" "label restore-hooks.dev/exec" \
  $K create --raw /api/v1/namespaces/shop/pods/unbound/binding -f - <<<"$(binding unbound '{}' '{"restore-hooks.dev/exec":"pending"}')"
expect_deny "admin binds it with a restore-hooks.dev annotation (legacy bindings resource)" "binding pod shop/unbound: annotation restore-hooks.dev/plan" \
  $K create -f - <<<"$(binding unbound '{"restore-hooks.dev/plan":"{}"}' '{}')"
expect_ok "admin binds it with other annotations (pods/binding)" \
  $K create --raw /api/v1/namespaces/shop/pods/unbound/binding -f - <<<"$(binding unbound '{"example.com/x":"1"}' '{}')"
expect_ok "  ... and it is bound (spec.nodeName=n1)" test "$($K -n shop get pod unbound -o jsonpath='{.spec.nodeName}')" = n1

echo "== pods created with hook state: only in a restore scope"
$K create namespace restored >/dev/null 2>&1; $K -n restored create serviceaccount default >/dev/null 2>&1
$K label namespace restored restore-hooks.dev/restore=r1 --overwrite >/dev/null
pod() { # namespace name-field labels-json annotations-json
  printf '{"apiVersion":"v1","kind":"Pod","metadata":{"namespace":"%s",%s,"labels":%s,"annotations":%s},"spec":{"containers":[{"name":"c","image":"busybox"}]}}' "$@"
}
expect_deny "admin creates other/copied with a plan and the exec label, outside every scope" \
  "pod other/copied is created with annotation restore-hooks.dev/plan, label restore-hooks.dev/exec outside every restore scope" \
  $K create -f - <<<"$(pod other '"name":"copied"' '{"restore-hooks.dev/exec":"pending"}' '{"restore-hooks.dev/plan":"{}"}')"
expect_deny "  ... the message names every key and the fix" \
  "annotation restore-hooks.dev/plan, annotation restore-hooks.dev/plan-signature, annotation restore-hooks.dev/status, annotation restore-hooks.dev/status-signature outside every restore scope (it has no pod label velero.io/restore-name with a value, and namespace other has no label restore-hooks.dev/restore with a value): restore-hooks never admitted it, so that state is copied (e.g. a pod template copied from a restored pod) or forged; remove these keys from the manifest or pod template, or create the pod in a restore scope; requested by admin" \
  $K create -f - <<<"$(pod other '"name":"copied"' '{}' '{"restore-hooks.dev/plan":"{}","restore-hooks.dev/plan-signature":"v1.x.y","restore-hooks.dev/status":"{}","restore-hooks.dev/status-signature":"v1.x.y"}')"
expect_deny "admin creates one with generateName, outside every scope" "annotation restore-hooks.dev/status-signature outside every restore scope" \
  $K create -f - <<<"$(pod other '"generateName":"copied-"' '{}' '{"restore-hooks.dev/status-signature":"v1.x.y"}')"
expect_deny "an empty restore pod label is no scope" "label restore-hooks.dev/exec outside every restore scope" \
  $K create -f - <<<"$(pod other '"name":"empty-label"' '{"velero.io/restore-name":"","restore-hooks.dev/exec":"pending"}' '{}')"
expect_ok "admin creates other/in-pod-scope with a plan and the restore pod label" \
  $K create -f - <<<"$(pod other '"name":"in-pod-scope"' '{"velero.io/restore-name":"r1","restore-hooks.dev/exec":"pending"}' '{"restore-hooks.dev/plan":"{}","restore-hooks.dev/plan-signature":"v1.x.y"}')"
expect_ok "admin creates restored/in-ns-scope with a plan in a labelled restore namespace" \
  $K create -f - <<<"$(pod restored '"name":"in-ns-scope"' '{"restore-hooks.dev/exec":"pending"}' '{"restore-hooks.dev/plan":"{}","restore-hooks.dev/status":"{}"}')"
expect_ok "admin creates other/injected-only with only restore-hooks.dev/injected, outside every scope" \
  $K create -f - <<<"$(pod other '"name":"injected-only"' '{}' '{"restore-hooks.dev/injected":"restore-hooks-init"}')"
expect_ok "admin creates other/plain (no hook state), outside every scope" \
  $K create -f - <<<"$(pod other '"name":"plain"' '{"app":"plain"}' '{}')"

echo "== pods created with a plan whose annotation exec hook runs on the creator's authority (allowedBy)"
# In the labelled namespace `restored`, so the scope check passes and only the allowedBy checks
# decide. The webhook writes allowedBy from the AdmissionReview's userInfo, which a direct caller
# of its port can forge; the policy asks the API server's own requester. nora may create pods
# there but not exec; pat may also create pods/exec there; Velero's ServiceAccount
# (system:serviceaccount:velero:velero, the chart's default config) may create pods.
$K apply -f - >/dev/null <<'Y'
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-creator, namespace: restored}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get, list, create, delete]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: exec, namespace: restored}
rules:
- {apiGroups: [""], resources: [pods/exec], verbs: [get, create]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: pod-creators, namespace: restored}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-creator}
subjects: [{kind: User, name: nora}, {kind: User, name: pat}, {kind: ServiceAccount, name: velero, namespace: velero}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: pat-exec, namespace: restored}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: exec}
subjects: [{kind: User, name: pat}]
Y
VELERO_SA=system:serviceaccount:velero:velero
can nora no create pods --subresource=exec -n restored
can pat yes create pods --subresource=exec -n restored
can $VELERO_SA no create pods --subresource=exec -n restored
planned_pod() { # name allowedBy-json (e.g. '"creator"', or null for none): a pod with the plan the webhook would write
  python3 - "$1" "$2" <<'PY'
import json, sys
name, allowed = sys.argv[1], json.loads(sys.argv[2])
hook = {"name": "<from-annotation>", "source": "annotation", "index": 0, "container": "c",
        "command": ["/bin/sh", "-c", 'echo \'"allowedBy":"velero"\''], "onError": "Continue",
        "execTimeoutMs": 30000, "waitTimeoutMs": None, "waitForReady": False}
if allowed is not None:
    hook["allowedBy"] = allowed
plan = {"id": "bYt2Qv8LkM0s3WcJ", "restore": "r1", "issuedAt": "2026-12-02T10:00:01Z", "hooks": [hook]}
print(json.dumps({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": name, "namespace": "restored",
                               "annotations": {"restore-hooks.dev/plan": json.dumps(plan, separators=(",", ":")),
                                               "restore-hooks.dev/plan-signature": "v1.0123abcd.00"}},
                  "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))
PY
}
expect_deny "nora (no pods/exec in restored) creates restored/by-nora with a plan allowedBy creator" \
  "pod restored/by-nora: its restore-hooks.dev/plan lets its annotation exec hook run on the authority of the identity that creates the pod (\"allowedBy\":\"creator\"), and user nora, who creates it, lacks create pods/exec in namespace restored: the pod must be created by an identity that has it (the restore-hooks webhook checked another identity), or without the plan" \
  $K --as=nora create -f - <<<"$(planned_pod by-nora '"creator"')"
# The API server generates the name before validating admission runs: the message names the pod.
expect_deny "  ... with generateName, the message names the generated pod" "pod restored/by-nora-" \
  $K --as=nora create -f - <<<"$(planned_pod by-nora '"creator"' | sed 's/"name": "by-nora"/"generateName": "by-nora-"/')"
expect_deny "Velero's ServiceAccount (no pods/exec in restored) creates one allowedBy creator" \
  "user $VELERO_SA, who creates it, lacks create pods/exec in namespace restored" \
  $K --as=$VELERO_SA create -f - <<<"$(planned_pod by-velero-creator '"creator"')"
expect_ok "pat (pods/exec in restored) creates restored/by-pat allowedBy creator" \
  $K --as=pat create -f - <<<"$(planned_pod by-pat '"creator"')"
expect_ok "admin creates restored/by-admin allowedBy creator" $K create -f - <<<"$(planned_pod by-admin '"creator"')"
expect_deny "nora creates restored/velero-by-nora with a plan allowedBy velero" \
  "pod restored/velero-by-nora: its restore-hooks.dev/plan lets its annotation exec hook run on the authority of the identity that creates the pod (\"allowedBy\":\"velero\"), and user nora, who creates it, is not Velero's ServiceAccount $VELERO_SA: the pod must be created by that ServiceAccount (the restore-hooks webhook checked another identity), or without the plan" \
  $K --as=nora create -f - <<<"$(planned_pod velero-by-nora '"velero"')"
expect_deny "pat (pods/exec, but not Velero) creates one allowedBy velero" "user pat, who creates it, is not Velero's ServiceAccount $VELERO_SA" \
  $K --as=pat create -f - <<<"$(planned_pod velero-by-pat '"velero"')"
expect_deny "admin (not Velero) creates one allowedBy velero" "user admin, who creates it, is not Velero's ServiceAccount" \
  $K create -f - <<<"$(planned_pod velero-by-admin '"velero"')"
expect_ok "Velero's ServiceAccount creates restored/by-velero allowedBy velero" \
  $K --as=$VELERO_SA create -f - <<<"$(planned_pod by-velero '"velero"')"
expect_ok "nora creates restored/hook-object-by-nora allowedBy restorehook/x" \
  $K --as=nora create -f - <<<"$(planned_pod hook-object-by-nora '"restorehook/x"')"
expect_ok "nora creates restored/crh-by-nora allowedBy clusterrestorehook/x" \
  $K --as=nora create -f - <<<"$(planned_pod crh-by-nora '"clusterrestorehook/x"')"
expect_ok "nora creates restored/no-allowed-by (a plan without allowedBy; its command quotes the text, JSON-escaped)" \
  $K --as=nora create -f - <<<"$(planned_pod no-allowed-by null)"
expect_ok "nora creates restored/no-plan without a plan" \
  $K --as=nora create -f - <<<"$(pod restored '"name":"no-plan"' '{}' '{}')"

echo "== Velero Restore hook authors (config.veleroHooks defer, the default: the policy is not own-only)"
# Velero's own Restore CRD when the realcp cache has the velero binary; otherwise a minimal one of
# the same shape for what the policy reads (no status subresource, spec.hooks.resources[]).
if [ -x "$BIN/velero" ] && "$BIN/velero" install --crds-only --dry-run -o yaml 2>/dev/null \
     | python3 -c 'import sys, yaml; d=[x for x in yaml.safe_load_all(sys.stdin) if x]; d=[i for x in d for i in (x.get("items") or [x])]; r=[x for x in d if x["metadata"]["name"]=="restores.velero.io"]; assert r; yaml.safe_dump(r[0], sys.stdout)' \
       >"$W/velero-crd.yaml" 2>/dev/null; then
  VELERO_CRD="Velero $("$BIN/velero" version --client-only 2>/dev/null | sed -n 's/.*Version: //p' | head -1)'s Restore CRD"
else
  VELERO_CRD="a minimal Restore CRD (no velero binary in $BIN)"
  cat >"$W/velero-crd.yaml" <<'Y'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: restores.velero.io}
spec:
  group: velero.io
  names: {kind: Restore, listKind: RestoreList, plural: restores, singular: restore}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-preserve-unknown-fields: true
            properties:
              backupName: {type: string}
              hooks:
                type: object
                properties:
                  resources:
                    type: array
                    items:
                      type: object
                      required: [name]
                      x-kubernetes-preserve-unknown-fields: true
                      properties:
                        name: {type: string}
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
Y
fi
expect_ok "install $VELERO_CRD" \
  sh -c "'$K' apply --server-side -f '$W/velero-crd.yaml' && '$K' wait --for=condition=Established crd/restores.velero.io --timeout=30s"
# Type-checking ran when the policy was created, without the CRD: re-create it so that it is
# checked against the CRD's schema too.
VP=restore-hooks-velero-restore-hook-authors
$K get validatingadmissionpolicy $VP -o json | python3 -c '
import json, sys
d = json.load(sys.stdin)
d["metadata"] = {k: v for k, v in d["metadata"].items() if k in ("name", "labels")}
d.pop("status", None)
json.dump(d, sys.stdout)' >"$W/velero-policy.json"
$K delete validatingadmissionpolicy $VP >/dev/null && $K create -f "$W/velero-policy.json" >/dev/null
typecheck " (re-created with $VELERO_CRD installed)" $VP
$K create namespace velero >/dev/null 2>&1; $K create namespace elsewhere >/dev/null 2>&1
$K apply -f - >/dev/null <<'Y'
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: restore-writer}
rules:
- {apiGroups: [velero.io], resources: [restores], verbs: [get, list, create, update, patch, delete]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: restore-writers}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: restore-writer}
subjects: [{kind: User, name: rita}, {kind: User, name: carol}, {kind: User, name: dave}]
Y
restore() { # namespace name spec-json
  printf '{"apiVersion":"velero.io/v1","kind":"Restore","metadata":{"name":"%s","namespace":"%s"},"spec":%s}' "$2" "$1" "$3"
}
HOOKS='{"backupName":"b1","hooks":{"resources":[{"name":"pg","includedNamespaces":["*"],"postHooks":[{"exec":{"container":"db","command":["/bin/sh","-c","id"]}}]}]}}'
# The policy was just re-created: wait until the API server enforces it (a dry run is admitted
# like a real request).
for _ in $(seq 40); do
  $K --as=rita create --dry-run=server -f - >/dev/null 2>&1 <<<"$(restore velero r-hooks "$HOOKS")" || break; sleep 0.25
done
expect_deny "rita (no pods/exec) creates Restore velero/r-hooks with hooks" \
  "creating Velero Restore velero/r-hooks with spec.hooks needs permission to create pods/exec cluster-wide" \
  $K --as=rita create -f - <<<"$(restore velero r-hooks "$HOOKS")"
expect_deny "  ... the message says who runs the hooks and names the user" \
  "(the hooks of a Restore are run, by restore-hooks or by Velero, in every namespace it restores into, namespace mappings included); user rita lacks it" \
  $K --as=rita create -f - <<<"$(restore velero r-hooks "$HOOKS")"
expect_deny "carol (pods/exec in shop only) creates it" "user carol lacks it" \
  $K --as=carol create -f - <<<"$(restore velero r-hooks "$HOOKS")"
expect_ok "dave (pods/exec cluster-wide) creates it" $K --as=dave create -f - <<<"$(restore velero r-hooks "$HOOKS")"
expect_ok "rita creates Restore velero/r-plain without hooks" $K --as=rita create -f - <<<"$(restore velero r-plain '{"backupName":"b1"}')"
expect_ok "rita creates Restore velero/r-empty with an empty hooks list" \
  $K --as=rita create -f - <<<"$(restore velero r-empty '{"backupName":"b1","hooks":{"resources":[]}}')"
expect_ok "rita creates a Restore with hooks outside the Velero namespace (not read by restore-hooks)" \
  $K --as=rita create -f - <<<"$(restore elsewhere r-hooks "$HOOKS")"
expect_ok "rita labels velero/r-hooks (spec.hooks unchanged)" $K --as=rita -n velero label restore r-hooks velero.io/backup-name=b1
expect_ok "rita writes its status and phase through the main resource, as Velero does" \
  $K --as=rita -n velero patch restore r-hooks --type=merge -p '{"status":{"phase":"InProgress","warnings":1}}'
expect_ok "rita adds a finalizer" $K --as=rita -n velero patch restore r-hooks --type=merge -p '{"metadata":{"finalizers":["restores.velero.io/external-resources-finalizer"]}}'
expect_ok "rita changes another spec field (spec.hooks unchanged)" \
  $K --as=rita -n velero patch restore r-hooks --type=merge -p '{"spec":{"includedNamespaces":["shop"]}}'
expect_deny "rita changes its spec.hooks" "updating Velero Restore velero/r-hooks with spec.hooks needs permission" \
  $K --as=rita -n velero patch restore r-hooks --type=json -p '[{"op":"replace","path":"/spec/hooks/resources/0/name","value":"pg2"}]'
expect_deny "rita adds hooks to velero/r-plain" "updating Velero Restore velero/r-plain with spec.hooks" \
  $K --as=rita -n velero patch restore r-plain --type=merge -p "{\"spec\":$HOOKS}"
expect_ok "rita removes the hooks of velero/r-hooks" \
  $K --as=rita -n velero patch restore r-hooks --type=merge -p '{"spec":{"hooks":{"resources":[]}}}'

echo "== namespace-labels: the controller changes only the restore-namespace label of a namespace"
# Restore windows (behaviour.md §1.6): RBAC grants the controller patch on namespaces; the policy
# keeps it to restore-hooks.dev/restore and the restore-hooks.dev/restore-window annotation.
$K create namespace windowed >/dev/null 2>&1
# A bare merge PATCH, as the binary sends it (kubectl label/patch GET the namespace first, which
# the controller may not); the API server's answer is printed, and a refusal fails.
nspatch() { # as body
  local srv code; srv=$($K config view --minify -o jsonpath='{.clusters[0].cluster.server}')
  code=$(curl -sS -o "$W/nspatch.out" -w '%{http_code}' --cacert "$(dirname "$KUBECONFIG")/pki/ca.crt" \
    -H "Authorization: Bearer admintoken" -H "Impersonate-User: $1" \
    -H 'Content-Type: application/merge-patch+json' -X PATCH "$srv/api/v1/namespaces/windowed" -d "$2")
  cat "$W/nspatch.out"; [ "${code:0:1}" = 2 ]
}
expect_ok "the controller labels namespace windowed for a restore window" nspatch $CTRL \
  '{"metadata":{"labels":{"restore-hooks.dev/restore":"r1"},"annotations":{"restore-hooks.dev/restore-window":"r1"}}}'
expect_deny "the controller sets a Pod Security label" \
  "restore-hooks' controller may change only the restore-hooks.dev/restore label and the restore-hooks.dev/restore-window annotation of namespace windowed; this update by $CTRL also changes label pod-security.kubernetes.io/enforce" \
  nspatch $CTRL '{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"privileged"}}}'
expect_deny "the controller changes another annotation" "also changes annotation example.com/x" \
  nspatch $CTRL '{"metadata":{"annotations":{"example.com/x":"1"}}}'
expect_ok "the controller removes the label and the annotation" nspatch $CTRL \
  '{"metadata":{"labels":{"restore-hooks.dev/restore":null},"annotations":{"restore-hooks.dev/restore-window":null}}}'
expect_ok "an admin sets a Pod Security label (the policy is about the controller only)" \
  $K label namespace windowed pod-security.kubernetes.io/enforce=baseline
can $CTRL yes patch namespaces
can $CTRL no update namespaces
can $WH no patch namespaces

echo "== Secrets: list and watch only with the plan-key name selector"
for who in $CTRL $WH; do
  expect_ok "$who lists Secrets with fieldSelector metadata.name=restore-hooks-plan-key" \
    $K --as=$who -n restore-hooks get secrets --field-selector metadata.name=restore-hooks-plan-key
  expect_deny "$who lists all Secrets of its namespace" "forbidden" $K --as=$who -n restore-hooks get secrets
done

echo "== RBAC"
can $CTRL yes create pods --subresource=exec -n shop
can $CTRL yes get pods --subresource=exec -n shop
can $CTRL yes patch pods --subresource=ephemeralcontainers -n shop
can $CTRL no update pods --subresource=ephemeralcontainers -n shop
can $CTRL yes patch pods -n shop
can $CTRL no update pods -n shop
can $CTRL no delete pods -n shop
can $CTRL yes create restoreruns.restore-hooks.dev
can $CTRL yes delete restoreruns.restore-hooks.dev
can $CTRL yes patch restoreruns.restore-hooks.dev --subresource=status
# The record of which hooks started (behaviour.md §9.5): the controller lists, creates, patches the
# status of and deletes its parts; nothing else, and no other identity anything.
can $CTRL yes list restorerecords.restore-hooks.dev
can $CTRL yes create restorerecords.restore-hooks.dev
can $CTRL yes delete restorerecords.restore-hooks.dev
can $CTRL yes patch restorerecords.restore-hooks.dev --subresource=status
can $CTRL no update restorerecords.restore-hooks.dev --subresource=status
can $CTRL no patch restorerecords.restore-hooks.dev
can $CTRL no get restorerecords.restore-hooks.dev
can $CTRL no update restorehooks.restore-hooks.dev --subresource=status -n shop
can $CTRL no get restorehooks.restore-hooks.dev --subresource=status -n shop
can $CTRL yes patch restorehooks.restore-hooks.dev --subresource=status -n shop
can $CTRL no patch restorehooks.restore-hooks.dev -n shop
can $CTRL yes get secrets/restore-hooks-plan-key -n restore-hooks
can $CTRL no get secrets/other -n restore-hooks
can $CTRL no get secrets -n shop
can $CTRL yes create secrets -n restore-hooks
can $CTRL no create secrets -n shop
can $CTRL yes update leases.coordination.k8s.io/rh-split-leader -n restore-hooks
can $CTRL no update leases.coordination.k8s.io/other -n restore-hooks
can $WH no create pods --subresource=exec -n shop
can $WH no get pods --subresource=exec -n shop
can $WH no patch pods --subresource=ephemeralcontainers -n shop
can $WH no patch pods -n shop
can $WH no create secrets -n restore-hooks
can $WH yes get secrets/restore-hooks-plan-key -n restore-hooks
can $WH yes watch restorehooks.restore-hooks.dev -A
can $WH yes patch clusterrestorehooks.restore-hooks.dev --subresource=status
can $WH no create events -n shop
can $WH no create restoreruns.restore-hooks.dev
can $WH no list restorerecords.restore-hooks.dev
can $WH no patch restorerecords.restore-hooks.dev --subresource=status
can $WH no get leases.coordination.k8s.io/rh-split-leader -n restore-hooks
can $WH yes create subjectaccessreviews.authorization.k8s.io
can $CTRL no create subjectaccessreviews.authorization.k8s.io
# A namespace the cache does not know yet: the webhook gets it; the split controller (late hooks,
# behaviour.md §1.5) lists it by name with the list right it has, and may not get it.
can $WH yes get namespaces/shop
can $CTRL no get namespaces/shop
can $CTRL yes watch namespaces
ns_by_name() { # as: list namespace shop by name, as the controller does; it must be in the answer
  "$K" get --raw '/api/v1/namespaces?fieldSelector=metadata.name%3Dshop' --as="$1" | grep -qF '"name":"shop"'
}
expect_ok "controller lists one namespace by name (fieldSelector)" ns_by_name $CTRL
expect_deny "controller gets one namespace (RBAC)" "forbidden" "$K" get --raw /api/v1/namespaces/shop --as=$CTRL
# split.enabled=false (ci/single-process-values.yaml, release rh-single): one ServiceAccount holds both.
SINGLE=system:serviceaccount:rh-single:rh-single-restore-hooks
can $SINGLE yes create subjectaccessreviews.authorization.k8s.io
can $SINGLE yes get namespaces/shop
can $SINGLE yes create pods --subresource=exec -n shop
can $SINGLE yes patch pods -n shop
can $SINGLE yes get secrets/rh-single-restore-hooks-plan-key -n rh-single
can $SINGLE yes create secrets -n rh-single
can $SINGLE yes update leases.coordination.k8s.io/rh-single-restore-hooks-controller -n rh-single
can $SINGLE no get secrets/restore-hooks-plan-key -n restore-hooks
can vic yes list restorehooks.restore-hooks.dev -n other
can vic no create restorehooks.restore-hooks.dev -n other
can vic no list clusterrestorehooks.restore-hooks.dev
can vic no create pods --subresource=exec -n other
can erin yes create restorehooks.restore-hooks.dev -n shop
can erin no patch restorehooks.restore-hooks.dev --subresource=status -n shop
can erin no create clusterrestorehooks.restore-hooks.dev
can erin no list restoreruns.restore-hooks.dev
can erin no list restorerecords.restore-hooks.dev
can erin no patch restorerecords.restore-hooks.dev --subresource=status
can vic no patch restorerecords.restore-hooks.dev --subresource=status

echo "== helm install, upgrade and uninstall: the CRDs are release objects (docs/install.md \"Upgrading\")"
# The CRDs above were applied without Helm's ownership metadata, as charts before crds.enabled left
# them (their crds/ directory). A release rh-up of its own (its other objects do not clash).
RH=(--namespace rh-up --set certManager.enabled=false --set tls.existingSecret=rh-up-tls
    --set "tls.caBundle=$(base64 -w0 "$P/ca.crt")")
expect_deny "helm install refuses CRDs it does not own" "invalid ownership metadata" \
  "$HELM" install rh-up "$ROOT/charts/restore-hooks" --create-namespace "${RH[@]}"
for crd in restorehooks clusterrestorehooks restoreruns restorerecords; do # the documented adoption
  "$K" label crd $crd.restore-hooks.dev app.kubernetes.io/managed-by=Helm --overwrite >/dev/null
  "$K" annotate crd $crd.restore-hooks.dev --overwrite meta.helm.sh/release-name=rh-up meta.helm.sh/release-namespace=rh-up >/dev/null
done
# They were applied with kubectl apply --server-side (as docs/install.md said before), so kubectl's
# field manager co-owns every field: Helm 4's server-side apply takes them over with
# --force-conflicts, needed on the install (or upgrade) that adopts them and on the first one that
# changes them ("conflict with \"kubectl\"" otherwise); after that, plain upgrades.
expect_ok "helm install after adopting the CRDs (--force-conflicts)" \
  "$HELM" install rh-up "$ROOT/charts/restore-hooks" --create-namespace --force-conflicts "${RH[@]}"
next_chart() { # DIR COLUMN: the chart with one more printer column on the RestoreHook CRD
  cp -r "$ROOT/charts/restore-hooks" "$1"
  python3 - "$1/files/crds/restorehooks.yaml" "$2" <<'PY'
import sys, yaml
path, column = sys.argv[1:]
crd = yaml.safe_load(open(path))
crd["spec"]["versions"][0].setdefault("additionalPrinterColumns", []).append(
    {"name": column, "type": "string", "jsonPath": ".metadata.uid"})
yaml.safe_dump(crd, open(path, "w"), sort_keys=False)
PY
}
has_column() { "$K" get crd restorehooks.restore-hooks.dev -o jsonpath='{.spec.versions[0].additionalPrinterColumns[*].name}' | tr ' ' '\n' | grep -qx "$1"; }
next_chart "$W/chart-next" UpgradeCheck
expect_deny "the first helm upgrade that changes a kubectl-applied CRD needs --force-conflicts" "conflict with \"kubectl\"" \
  "$HELM" upgrade rh-up "$W/chart-next" "${RH[@]}"
expect_ok "helm upgrade --force-conflicts with a changed CRD" "$HELM" upgrade rh-up "$W/chart-next" --force-conflicts "${RH[@]}"
expect_ok "the API server serves the upgraded CRD" has_column UpgradeCheck
next_chart "$W/chart-next2" UpgradeCheck2
expect_ok "the next helm upgrade changes the CRD without flags" "$HELM" upgrade rh-up "$W/chart-next2" "${RH[@]}"
expect_ok "the API server serves it (the column of the previous version gone)" sh -c "$(declare -f has_column); K='$K'; has_column UpgradeCheck2 && ! has_column UpgradeCheck"
# The pre-delete hook's command with exactly the hook's RBAC (the ServiceAccount impersonated;
# nothing runs pods here), when the binary is built.
RHBIN="$ROOT/target/debug/restore-hooks"
if [ -x "$RHBIN" ]; then
  "$HELM" template rh-up "$ROOT/charts/restore-hooks" "${RH[@]}" --kube-version "$KUBE_VERSION" --show-only templates/webhook-cleanup.yaml \
    | python3 -c 'import sys, yaml; yaml.safe_dump_all([d for d in yaml.safe_load_all(sys.stdin) if d and d["kind"] != "Job"], sys.stdout)' \
    | "$K" apply --server-side -f - >/dev/null
  sed "s|users: \[{name: admin, user: {token: admintoken}}\]|users: [{name: admin, user: {token: admintoken, as: 'system:serviceaccount:rh-up:rh-up-restore-hooks-webhook-cleanup'}}]|" \
    "$KUBECONFIG" >"$W/cleanup.kubeconfig"
  expect_deny "remove-webhook leaves another release's configuration alone" "not this release's" \
    "$RHBIN" remove-webhook --kubeconfig "$W/cleanup.kubeconfig" --name rh-up-restore-hooks --instance other
  expect_ok "remove-webhook, as the pre-delete hook's ServiceAccount, deletes the configuration" \
    "$RHBIN" remove-webhook --kubeconfig "$W/cleanup.kubeconfig" --name rh-up-restore-hooks --instance rh-up
  expect_ok "the configuration is gone" sh -c "! '$K' get mutatingwebhookconfiguration rh-up-restore-hooks 2>/dev/null"
  expect_ok "remove-webhook again: already gone is success" \
    "$RHBIN" remove-webhook --kubeconfig "$W/cleanup.kubeconfig" --name rh-up-restore-hooks --instance rh-up
  expect_deny "the hook's ServiceAccount may delete no other configuration" "forbidden" \
    "$K" --kubeconfig "$W/cleanup.kubeconfig" delete mutatingwebhookconfiguration restore-hooks --dry-run=server
else
  echo "  SKIP  remove-webhook as the pre-delete hook's ServiceAccount: $RHBIN not built"
fi
# --no-hooks: no kubelet here to run the pre-delete Job.
expect_ok "helm uninstall" "$HELM" uninstall rh-up -n rh-up --no-hooks
expect_ok "the CRDs stay (helm.sh/resource-policy: keep)" "$K" get crd restorehooks.restore-hooks.dev restorerecords.restore-hooks.dev
expect_ok "the webhook configuration and the Deployments are gone" sh -c \
  "! '$K' get mutatingwebhookconfiguration rh-up-restore-hooks 2>/dev/null && [ -z \"\$('$K' -n rh-up get deployments -o name)\" ]"

echo "$PASS passed, $FAIL failed"
[ "$FAIL" = 0 ] || exit 1
