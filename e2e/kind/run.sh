#!/usr/bin/env bash
# End-to-end test of restore-hooks on a throwaway kind cluster (opt-in; needs docker, kind,
# kubectl, helm and jq on PATH, and network access to pull images).
#
#   e2e/kind/run.sh
#
# 1. creates a kind cluster, 2. builds the image (the top-level Dockerfile) and loads it into kind,
# 3. installs cert-manager (pinned), 4. helm-installs charts/restore-hooks, 5. creates a restore
# namespace (label restore-hooks.dev/restore), RestoreHooks and pods, and 6. asserts that the
# init containers ran, every exec hook succeeded (status annotation, label
# restore-hooks.dev/exec=done, a Normal HooksCompleted Event), a Velero-labelled pod in an
# unlabelled namespace is handled too, a pod in neither is left alone, the RestoreRun of the restore
# completed, the chart's admission policies refuse a hook author without exec rights and a
# reset of a finished pod's hook state, and each Deployment logs its own part (admission on the
# webhook pods, hook results on the controller pods).
# The chart is installed with its defaults (split mode: Deployments <release>-webhook and
# <release>-controller) unless SINGLE=1 (split.enabled=false: one Deployment <release> running serve).
# The cluster is deleted on exit unless KEEP_CLUSTER=1.
#
# Environment:
#   CLUSTER_NAME          kind cluster name            (default restore-hooks-e2e)
#   KIND_NODE_IMAGE       node image                   (default kindest/node:v1.35.0, the oldest supported)
#   CERT_MANAGER_VERSION  cert-manager release         (default v1.19.1)
#   IMAGE                 image to build and load      (default restore-hooks:e2e)
#   SKIP_BUILD=1          reuse an existing $IMAGE
#   KEEP_CLUSTER=1        keep the cluster afterwards (and reuse it if it exists)
#   TIMEOUT               seconds to wait for hooks    (default 240)
#   SINGLE=1              install with split.enabled=false (single-process: one Deployment, serve);
#                         default: the chart's split mode (webhook and controller Deployments)
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HERE="$ROOT/e2e/kind"
CLUSTER_NAME="${CLUSTER_NAME:-restore-hooks-e2e}"
KIND_NODE_IMAGE="${KIND_NODE_IMAGE:-kindest/node:v1.35.0}"
CERT_MANAGER_VERSION="${CERT_MANAGER_VERSION:-v1.19.1}"
IMAGE="${IMAGE:-restore-hooks:e2e}"
BUSYBOX="busybox:1.36.1"
RELEASE="restore-hooks"
NAMESPACE="restore-hooks"
TIMEOUT="${TIMEOUT:-240}"
KEEP_CLUSTER="${KEEP_CLUSTER:-0}"
SKIP_BUILD="${SKIP_BUILD:-0}"
SINGLE="${SINGLE:-0}"
if [ "$SINGLE" = 1 ]; then
  # split.enabled=false: one Deployment <release> running `restore-hooks serve` (webhook + controller).
  WEBHOOK_DEPLOY="$RELEASE"
  CONTROLLER_DEPLOY="$RELEASE"
  DEPLOYMENTS="$RELEASE"
  WEBHOOK_PODS="app.kubernetes.io/name=restore-hooks"
  CONTROLLER_PODS="$WEBHOOK_PODS"
  CHART_MODE=(--set split.enabled=false)
else
  # The chart defaults: <release>-webhook (admission) and <release>-controller (execs), their pods
  # told apart by app.kubernetes.io/component.
  WEBHOOK_DEPLOY="$RELEASE-webhook"
  CONTROLLER_DEPLOY="$RELEASE-controller"
  DEPLOYMENTS="$WEBHOOK_DEPLOY $CONTROLLER_DEPLOY"
  WEBHOOK_PODS="app.kubernetes.io/name=restore-hooks,app.kubernetes.io/component=webhook"
  CONTROLLER_PODS="app.kubernetes.io/name=restore-hooks,app.kubernetes.io/component=controller"
  CHART_MODE=()
fi
pods_of() { # deployment -> the label selector of its pods (as the chart sets them)
  if [ "$1" = "$CONTROLLER_DEPLOY" ]; then printf '%s' "$CONTROLLER_PODS"; else printf '%s' "$WEBHOOK_PODS"; fi
}
# The controller's ServiceAccount: the only writer of restore-hooks.dev/* pod annotations and labels.
CONTROLLER_SA="system:serviceaccount:$NAMESPACE:$RELEASE"

HELM="helm"
if ! command -v helm >/dev/null 2>&1 && [ -x "$ROOT/.tools/helm/helm" ]; then HELM="$ROOT/.tools/helm/helm"; fi

log() { printf '\n[e2e %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
pass() { printf '  PASS  %s\n' "$*"; }
FAILS=0
fail() { printf '  FAIL  %s\n' "$*" >&2; FAILS=$((FAILS + 1)); }
die() { printf '[e2e] ERROR: %s\n' "$*" >&2; exit 1; }

# SPLIT=1 chose split mode while single-process was the default; split is the default now.
[ -z "${SPLIT:-}" ] || die "SPLIT is gone: split mode is the chart's and this script's default; SINGLE=1 runs single-process"

for tool in docker kind kubectl jq; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' is required on PATH"
done
command -v "$HELM" >/dev/null 2>&1 || [ -x "$HELM" ] || die "'helm' is required (or run .ci/install-tools.sh)"

KCTX="kind-$CLUSTER_NAME"
k() { kubectl --context "$KCTX" "$@"; }

diagnostics() {
  log "diagnostics"
  k get pods -A -o wide || true
  for d in $DEPLOYMENTS; do k -n "$NAMESPACE" describe deployment "$d" || true; done
  # Each Deployment's logs (split: admission on the webhook pods, hooks on the controller pods).
  for d in $DEPLOYMENTS; do
    log "logs of deployment $d"
    k -n "$NAMESPACE" logs -l "$(pods_of "$d")" --all-containers --tail=200 --prefix || true
  done
  k -n "$NAMESPACE" get certificate,issuer -o wide || true
  k get restoreruns -o yaml || true
  k get validatingadmissionpolicies -o wide || true
  k get mutatingwebhookconfiguration "$RELEASE" -o yaml | grep -v caBundle || true
  for ns in shop legacy plain; do k -n "$ns" get events --sort-by=.lastTimestamp || true; done
  for p in shop/db shop/web legacy/cache; do
    k -n "${p%/*}" get pod "${p#*/}" -o json 2>/dev/null \
      | jq '{name: .metadata.name, labels: .metadata.labels, annotations: .metadata.annotations,
             init: .status.initContainerStatuses, containers: .status.containerStatuses}' || true
  done
}

CREATED=0
cleanup() {
  rc=$?
  if [ "$rc" -ne 0 ] && [ "$CREATED" = 1 ]; then diagnostics; fi
  if [ "$CREATED" = 1 ] && [ "$KEEP_CLUSTER" != 1 ]; then
    log "deleting kind cluster $CLUSTER_NAME"
    kind delete cluster --name "$CLUSTER_NAME" >/dev/null 2>&1 || true
  elif [ "$CREATED" = 1 ]; then
    log "keeping cluster $CLUSTER_NAME (kubectl --context $KCTX ...; kind delete cluster --name $CLUSTER_NAME)"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- 1. cluster -------------------------------------------------------------------------------
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER_NAME"; then
  [ "$KEEP_CLUSTER" = 1 ] || die "kind cluster $CLUSTER_NAME already exists (delete it, or set KEEP_CLUSTER=1 to reuse it)"
  log "reusing kind cluster $CLUSTER_NAME"
else
  log "creating kind cluster $CLUSTER_NAME ($KIND_NODE_IMAGE)"
  kind create cluster --name "$CLUSTER_NAME" --image "$KIND_NODE_IMAGE" --wait 120s
fi
CREATED=1

# --- 2. image ---------------------------------------------------------------------------------
if [ "$SKIP_BUILD" != 1 ]; then
  log "building $IMAGE"
  DOCKER_BUILDKIT=1 docker build -f "$ROOT/Dockerfile" -t "$IMAGE" "$ROOT"
fi
log "loading images into kind"
kind load docker-image "$IMAGE" --name "$CLUSTER_NAME"
docker image inspect "$BUSYBOX" >/dev/null 2>&1 || docker pull "$BUSYBOX"
kind load docker-image "$BUSYBOX" --name "$CLUSTER_NAME"

# --- 3. cert-manager --------------------------------------------------------------------------
log "installing cert-manager $CERT_MANAGER_VERSION"
k apply -f "https://github.com/cert-manager/cert-manager/releases/download/${CERT_MANAGER_VERSION}/cert-manager.yaml" >/dev/null
for d in cert-manager cert-manager-cainjector cert-manager-webhook; do
  k -n cert-manager rollout status "deployment/$d" --timeout=180s
done
# cert-manager's own webhook needs its CA injected before it accepts Issuers/Certificates.
ok=0
for _ in $(seq 1 60); do
  if k apply --dry-run=server -f - >/dev/null 2>&1 <<'YAML'
apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: e2e-probe, namespace: default}
spec: {selfSigned: {}}
YAML
  then ok=1; break; fi
  sleep 2
done
[ "$ok" = 1 ] || die "cert-manager's webhook did not become ready"
pass "cert-manager accepts Issuers"

# --- 4. the chart -----------------------------------------------------------------------------
log "helm install $RELEASE ($([ "$SINGLE" = 1 ] && echo "single-process: split.enabled=false" || echo "split mode, the chart default"))"
repo="${IMAGE%:*}"; tag="${IMAGE##*:}"
# One kind node: the default hard pod anti-affinity would leave the second replica Pending.
# CHART_MODE is empty by default (split.enabled is left to the chart).
"$HELM" upgrade --install "$RELEASE" "$ROOT/charts/restore-hooks" \
  --kube-context "$KCTX" --namespace "$NAMESPACE" --create-namespace \
  --set image.repository="$repo" --set image.tag="$tag" --set image.pullPolicy=Never \
  --set config.logLevel='info,restore_hooks=debug' --set podAntiAffinity=soft \
  ${CHART_MODE[@]+"${CHART_MODE[@]}"} \
  --wait --timeout 5m
k -n "$NAMESPACE" wait --for=condition=Ready "certificate/${RELEASE}-serving" --timeout=120s
log "waiting for cainjector to fill the caBundle"
for _ in $(seq 1 60); do
  n=$(k get mutatingwebhookconfiguration "$RELEASE" -o json \
        | jq '[.webhooks[] | select((.clientConfig.caBundle // "") != "")] | length')
  [ "$n" = 2 ] && break
  sleep 2
done
[ "$n" = 2 ] || die "caBundle not injected into both webhooks"
pass "caBundle injected into both webhooks"
for d in $DEPLOYMENTS; do
  k -n "$NAMESPACE" rollout status "deployment/$d" --timeout=120s
  pass "deployment $d ready: $(k -n "$NAMESPACE" get deploy "$d" -o jsonpath='{.status.readyReplicas}') replicas"
done
k -n "$NAMESPACE" get secret "$RELEASE-plan-key" >/dev/null \
  && pass "the binary created the plan-key Secret $RELEASE-plan-key" || fail "no plan-key Secret $RELEASE-plan-key"

# --- 5. sample app ----------------------------------------------------------------------------
log "creating namespaces and RestoreHooks"
k apply -f "$HERE/manifests/namespaces.yaml"
k apply -f "$HERE/manifests/rbac.yaml"
# ValidatingAdmissionPolicy hook-authors: a user who may write RestoreHooks but not exec is refused.
out=$(k apply --dry-run=server --as=e2e-hook-author -f "$HERE/manifests/restorehooks.yaml" 2>&1 || true)
grep -q "needs permission to create pods/exec in namespace shop" <<<"$out" \
  && pass "a RestoreHook author without pods/exec is refused, with the missing permission named" \
  || fail "RestoreHook by a user without pods/exec was not refused as expected: $out"
k apply -f "$HERE/manifests/restorehooks.yaml"

log "waiting until the webhook answers (server-side dry run of a restored pod)"
ok=0
for _ in $(seq 1 60); do
  if k apply --dry-run=server -o json -f "$HERE/manifests/pods.yaml" 2>/dev/null \
      | jq -e '[.items[]? // .] | map(select(.metadata.name == "web")) | .[0].spec.initContainers // [] | map(.name) | index("restore-data")' >/dev/null; then
    ok=1; break
  fi
  sleep 2
done
[ "$ok" = 1 ] || die "the webhook did not mutate a dry-run pod within 120s"
pass "webhook mutates a server-side dry run"

k apply -f "$HERE/manifests/pods.yaml"

# --- 6. assertions ----------------------------------------------------------------------------
wait_exec_label() { # ns pod
  local ns="$1" pod="$2" v=""
  for _ in $(seq 1 "$TIMEOUT"); do
    v=$(k -n "$ns" get pod "$pod" -o jsonpath='{.metadata.labels.restore-hooks\.dev/exec}' 2>/dev/null || true)
    case "$v" in done|failed) break ;; esac
    sleep 1
  done
  printf '%s' "$v"
}

check_pod() { # ns pod hook-count expected-stdout-of-first-hook
  local ns="$1" pod="$2" hooks="$3" want="$4" label status
  label=$(wait_exec_label "$ns" "$pod")
  [ "$label" = done ] && pass "$ns/$pod: label restore-hooks.dev/exec=done" \
    || fail "$ns/$pod: label restore-hooks.dev/exec=${label:-<none>} after ${TIMEOUT}s, want done"
  status=$(k -n "$ns" get pod "$pod" -o json | jq -r '.metadata.annotations["restore-hooks.dev/status"] // empty' || true)
  if [ -z "$status" ]; then fail "$ns/$pod: no restore-hooks.dev/status annotation"; return; fi
  printf '%s' "$status" | jq -e --argjson n "$hooks" '.hooks | length == $n' >/dev/null \
    && pass "$ns/$pod: status lists $hooks hook(s)" || fail "$ns/$pod: status does not list $hooks hooks: $status"
  printf '%s' "$status" | jq -e 'all(.hooks[]; .phase == "Succeeded" and .exitCode == 0)' >/dev/null \
    && pass "$ns/$pod: every hook Succeeded with exit code 0" || fail "$ns/$pod: not all hooks succeeded: $status"
  printf '%s' "$status" | jq -e --arg w "$want" '.hooks[0].stdout | contains($w)' >/dev/null \
    && pass "$ns/$pod: first hook printed '$want'" || fail "$ns/$pod: first hook stdout lacks '$want': $status"
  # Successes share the pod's one HooksCompleted Event (docs/behaviour.md §6.12).
  local completed
  completed=$(k -n "$ns" get events --field-selector "involvedObject.name=$pod,reason=HooksCompleted" -o json \
                | jq -r '[.items[] | select(.type == "Normal") | .message] | first // ""' || echo "")
  case "$completed" in
    *"$hooks hook(s): $hooks succeeded, 0 failed"*) pass "$ns/$pod: Normal HooksCompleted Event: $hooks succeeded" ;;
    *) fail "$ns/$pod: no Normal HooksCompleted Event saying $hooks hook(s) succeeded: '$completed'" ;;
  esac
}

check_init() { # ns pod container
  local ns="$1" pod="$2" c="$3" code
  code=$(k -n "$ns" get pod "$pod" -o json \
    | jq -r --arg c "$c" '.status.initContainerStatuses[]? | select(.name == $c) | .state.terminated.exitCode // "none"' || true)
  [ "$code" = 0 ] && pass "$ns/$pod: init container $c ran and exited 0" \
    || fail "$ns/$pod: init container $c state: ${code:-absent}"
  k -n "$ns" get pod "$pod" -o json | jq -e --arg c "$c" \
    '.metadata.annotations["restore-hooks.dev/injected"] // "" | split(",") | index($c)' >/dev/null \
    && pass "$ns/$pod: annotation restore-hooks.dev/injected names $c" \
    || fail "$ns/$pod: annotation restore-hooks.dev/injected lacks $c"
}

log "asserting (waiting up to ${TIMEOUT}s per pod)"
for p in shop/db shop/web legacy/cache plain/bystander; do
  k -n "${p%/*}" wait --for=condition=Ready "pod/${p#*/}" --timeout="${TIMEOUT}s" >/dev/null \
    && pass "$p is Ready" || fail "$p did not become Ready"
done

# db: spec init hook from a RestoreHook seeded the volume (the app exits 3 without the file).
check_init shop db seed-data
check_pod shop db 2 "restored-by-init-hook"
[ "$(k -n shop exec db -c db -- cat /data/post-hook.txt 2>/dev/null)" = reindexed ] \
  && pass "shop/db: second exec hook wrote /data/post-hook.txt" || fail "shop/db: /data/post-hook.txt missing"

# web: Velero annotation init hook.
check_init shop web restore-data
k -n shop logs web -c restore-data | grep -q restored-by-annotation \
  && pass "shop/web: annotation init container wrote and printed its file" \
  || fail "shop/web: annotation init container output missing"
check_pod shop web 1 "warmup-ok"

# cache: Velero-labelled pod in an unlabelled namespace (first webhook, objectSelector).
check_pod legacy cache 1 "primed"

# bystander: neither label: untouched.
k -n plain get pod bystander -o json | jq -e \
  '(.metadata.annotations // {} | has("restore-hooks.dev/plan") | not) and ((.spec.initContainers // []) | length == 0) and (.metadata.labels // {} | has("restore-hooks.dev/exec") | not)' >/dev/null \
  && pass "plain/bystander: not mutated" || fail "plain/bystander: was mutated"

# RestoreHook status written by the controller.
k -n shop get restorehook db-rehydrate -o json | jq -e '.status.hooks.succeeded >= 2' >/dev/null \
  && pass "RestoreHook shop/db-rehydrate: status.hooks.succeeded >= 2" \
  || fail "RestoreHook shop/db-rehydrate status: $(k -n shop get restorehook db-rehydrate -o jsonpath='{.status}')"

# One RestoreRun per restore, written by the controller.
if k wait --for=condition=Completed restorerun/e2e-restore-1 --timeout=60s >/dev/null 2>&1; then
  phase=$(k get restorerun e2e-restore-1 -o jsonpath='{.status.phase}')
  [ "$phase" = Completed ] && pass "RestoreRun e2e-restore-1: Completed" || fail "RestoreRun e2e-restore-1: phase $phase, want Completed"
else
  fail "RestoreRun e2e-restore-1 did not complete: $(k get restorerun e2e-restore-1 -o jsonpath='{.status}' 2>&1)"
fi

# ValidatingAdmissionPolicy pod-hook-state: a finished hook cannot be reset into a re-run, except by
# the controller; other label changes pass.
out=$(k -n shop label pod db restore-hooks.dev/exec=pending --overwrite 2>&1 || true)
grep -q "only the restore-hooks controller" <<<"$out" \
  && pass "shop/db: resetting restore-hooks.dev/exec to pending is refused" \
  || fail "shop/db: resetting restore-hooks.dev/exec was not refused: $out"
k -n shop label pod db e2e/touched=yes >/dev/null 2>&1 \
  && pass "shop/db: other labels can still be changed" || fail "shop/db: an unrelated label change was refused"
# (a server-side dry run: admission runs, nothing is stored)
k -n shop label pod db restore-hooks.dev/exec=failed --overwrite --dry-run=server --as="$CONTROLLER_SA" >/dev/null 2>&1 \
  && pass "shop/db: the controller's ServiceAccount may write the exec label" \
  || fail "shop/db: the controller's ServiceAccount may not write the exec label"

# Logs: admission on the webhook pods, hook results on the controller pods (the same pods in
# single-process mode). --tail=-1: with a selector kubectl shows only 10 lines a pod by default.
webhook_logs=$(k -n "$NAMESPACE" logs -l "$WEBHOOK_PODS" --tail=-1 2>/dev/null || true)
controller_logs=$(k -n "$NAMESPACE" logs -l "$CONTROLLER_PODS" --tail=-1 2>/dev/null || true)
grep -q 'admission reviewed' <<<"$webhook_logs" \
  && pass "deployment $WEBHOOK_DEPLOY logs 'admission reviewed'" \
  || fail "no 'admission reviewed' line in the logs of deployment $WEBHOOK_DEPLOY (pods $WEBHOOK_PODS)"
# One grep, not a pipe into grep -q: with pipefail the first grep's SIGPIPE would read as no match.
grep -Eq 'hook finished.*shop/db|shop/db.*hook finished' <<<"$controller_logs" \
  && pass "deployment $CONTROLLER_DEPLOY logs 'hook finished' for shop/db" \
  || fail "no 'hook finished' line for shop/db in the logs of deployment $CONTROLLER_DEPLOY (pods $CONTROLLER_PODS)"
if [ "$SINGLE" != 1 ]; then
  if grep -q 'hook finished' <<<"$webhook_logs"; then
    fail "deployment $WEBHOOK_DEPLOY logged 'hook finished': the webhook must not exec"
  else
    pass "deployment $WEBHOOK_DEPLOY ran no hook (split mode)"
  fi
fi

# Metrics from a webhook replica.
pod=$(k -n "$NAMESPACE" get pods -l "$WEBHOOK_PODS" -o jsonpath='{.items[0].metadata.name}' || true)
if k -n "$NAMESPACE" get --raw "/api/v1/namespaces/$NAMESPACE/pods/$pod:8080/proxy/metrics" 2>/dev/null \
    | grep -q '^restore_hooks_admission_requests_total'; then
  pass "metrics endpoint serves restore_hooks_admission_requests_total"
else
  fail "metrics endpoint not reachable or metric missing"
fi

if [ "$FAILS" -ne 0 ]; then
  log "$FAILS assertion(s) FAILED"
  exit 1
fi
log "all e2e assertions passed"
