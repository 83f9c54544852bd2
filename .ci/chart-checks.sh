#!/usr/bin/env bash
# Offline checks of the Helm chart (charts/restore-hooks). Needs the tools of .ci/install-tools.sh.
#
#   .ci/chart-checks.sh [PATH/TO/restore-hooks]      (default: target/debug/restore-hooks)
#
# 1. helm lint --strict (Helm 4 and Helm 3) with the default values and every ci/*-values.yaml.
# 2. Renders (helm template --include-crds; Helm 3 must give the same objects) with: defaults; every optional part on
#    (ci/all-on-values.yaml); an own cert-manager issuer (ci/byo-issuer-values.yaml); and
#    certManager.enabled=false with tls.existingSecret + a real caBundle from certs/make-certs.sh.
#    The binary serves those certificates (webhook --no-cluster) and a TLS client verifying the
#    chain and the <svc>.<ns>.svc name gets an AdmissionReview answer (.ci/tls_smoke.py).
# 3. Negative renders: certManager off without caBundle/existingSecret, bad enum, unknown value,
#    too short terminationGracePeriodSeconds must all fail with a clear message.
# 4. NOTES.txt renders (helm install --dry-run=client).
# 5. Validates every rendered object with kubernetes-validate --strict against the oldest (1.33)
#    and newest (1.37) supported Kubernetes versions (CRD-based kinds only warn).
# 6. .ci/chart_assertions.py: object inventory, both webhooks, namespace exclusions, Pod Security
#    "restricted" by construction, TLS mount, least RBAC, CRD == `restore-hooks crd`.
# 7. The kind e2e sample manifests: strict schemas, and `restore-hooks inject` on each pod gives
#    what e2e/kind/run.sh expects (.ci/e2e_manifest_checks.py).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
CHART="${CHART_DIR:-charts/restore-hooks}"
TOOLS="${TOOLS_DIR:-$ROOT/.tools}"
HELM="$TOOLS/helm/helm"
HELM3="$TOOLS/helm3/helm"
KV="$TOOLS/venv/bin/kubernetes-validate"
PY="$TOOLS/venv/bin/python"
BIN="${1:-target/debug/restore-hooks}"
RELEASE="restore-hooks"
NAMESPACE="restore-hooks"
# Oldest supported (k8s-openapi's v1_33 floor) and newest schemas shipped by kubernetes-validate.
K8S_VERSIONS="${K8S_VERSIONS:-1.33.0 1.37.0}"
API_VERSIONS=(--api-versions cert-manager.io/v1 --api-versions monitoring.coreos.com/v1)

FAILED=0
step() { printf '\n==> %s\n' "$*"; }
ok() { printf '  ok    %s\n' "$*"; }
bad() { printf '  FAIL  %s\n' "$*" >&2; FAILED=$((FAILED + 1)); }
die() { printf 'chart-checks: %s\n' "$*" >&2; exit 2; }

[ -x "$HELM" ] || die "$HELM missing: run .ci/install-tools.sh"
[ -x "$HELM3" ] || die "$HELM3 missing: run .ci/install-tools.sh"
[ -x "$KV" ] || die "$KV missing: run .ci/install-tools.sh"
[ -x "$BIN" ] || die "binary $BIN missing: run cargo build (or pass its path)"
"$HELM" version --short | grep -q '^v4\.1\.4' || die "unexpected helm version: $("$HELM" version --short)"
"$HELM3" version --short | grep -q '^v3\.17\.1' || die "unexpected helm 3 version: $("$HELM3" version --short)"

OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
START=$(date +%s)

step "tools: $("$HELM" version --short) and $("$HELM3" version --short), kubernetes-validate $("$KV" --version 2>&1 | tr -d '\n'), binary $BIN"
for v in $K8S_VERSIONS; do
  minor="${v%.*}"
  if "$PY" - "$minor" <<'PY'
import os, sys, kubernetes_validate
base = os.path.join(os.path.dirname(kubernetes_validate.__file__), "kubernetes-json-schema")
sys.exit(0 if os.path.isdir(os.path.join(base, f"v{sys.argv[1]}.0-local-strict")) else 1)
PY
  then ok "strict schemas for Kubernetes $minor present"
  else bad "no strict schemas for Kubernetes $minor in kubernetes-validate"
  fi
done

step "helm lint --strict"
lint() {
  local label="$1"; shift
  local helm log
  for helm in "$HELM" "$HELM3"; do
    log="$OUT/lint-$label.log"
    if "$helm" lint --strict "$CHART" --namespace "$NAMESPACE" "$@" >"$log" 2>&1; then
      ok "lint ($label, $("$helm" version --short))"
    else
      bad "lint ($label, $("$helm" version --short))"; sed 's/^/        /' "$log" >&2
    fi
  done
}
lint default
for f in "$CHART"/ci/*-values.yaml; do
  lint "$(basename "$f" -values.yaml)" -f "$f"
done

step "certs/make-certs.sh (caBundle for the certManager.enabled=false render)"
if certs/make-certs.sh "$RELEASE" "$NAMESPACE" "$OUT/certs" >"$OUT/no-cert-manager.cabundle" 2>"$OUT/certs.log" \
   && openssl verify -CAfile "$OUT/certs/ca.crt" "$OUT/certs/tls.crt" >/dev/null 2>&1 \
   && openssl x509 -in "$OUT/certs/tls.crt" -noout -ext subjectAltName 2>/dev/null \
        | grep -q "DNS:$RELEASE.$NAMESPACE.svc.cluster.local" \
   && grep -q 'BEGIN PRIVATE KEY' "$OUT/certs/tls.key"; then
  ok "make-certs.sh: CA + ECDSA PKCS#8 serving cert with the service SANs"
else
  bad "make-certs.sh failed"; sed 's/^/        /' "$OUT/certs.log" >&2
  echo "Y2E=" >"$OUT/no-cert-manager.cabundle"
fi
if "$PY" .ci/tls_smoke.py "$BIN" "$OUT/certs" "$RELEASE" "$NAMESPACE"; then
  ok "the binary serves make-certs.sh output; TLS verifies against the caBundle and the .svc name"
else
  bad "serving make-certs.sh output with $BIN"
fi
CABUNDLE="$(cat "$OUT/no-cert-manager.cabundle")"
lint no-cert-manager --set certManager.enabled=false --set tls.existingSecret=restore-hooks-tls-manual --set "tls.caBundle=$CABUNDLE"

step "helm template"
render() {
  local label="$1"; shift
  if "$HELM" template "$RELEASE" "$CHART" --namespace "$NAMESPACE" --include-crds \
       --kube-version 1.33.0 "${API_VERSIONS[@]}" "$@" >"$OUT/$label.yaml" 2>"$OUT/$label.err"; then
    ok "render ($label): $(grep -c '^kind:' "$OUT/$label.yaml") objects"
    # Helm 3 must render the same objects (it orders kinds differently, so compare as sets).
    if "$HELM3" template "$RELEASE" "$CHART" --namespace "$NAMESPACE" --include-crds \
         --kube-version 1.33.0 "${API_VERSIONS[@]}" "$@" >"$OUT/$label.helm3.yaml" 2>"$OUT/$label.err" \
       && "$PY" - "$OUT/$label.yaml" "$OUT/$label.helm3.yaml" <<'PY'
import sys, yaml
docs = [sorted(yaml.safe_dump(d, sort_keys=True) for d in yaml.safe_load_all(open(p)) if d)
        for p in sys.argv[1:]]
sys.exit(0 if docs[0] == docs[1] else 1)
PY
    then
      ok "render ($label): Helm 3 renders the same objects"
    else
      bad "render ($label): Helm 3 differs"; diff "$OUT/$label.yaml" "$OUT/$label.helm3.yaml" | head -40 >&2
    fi
  else
    bad "render ($label)"; sed 's/^/        /' "$OUT/$label.err" >&2
    : >"$OUT/$label.yaml"
  fi
}
render default
render all-on -f "$CHART/ci/all-on-values.yaml"
render byo-issuer -f "$CHART/ci/byo-issuer-values.yaml"
render no-cert-manager --set certManager.enabled=false --set tls.existingSecret=restore-hooks-tls-manual \
  --set "tls.caBundle=$CABUNDLE"

step "helm template must refuse bad values"
refuse() {
  local label="$1" want="$2"; shift 2
  if "$HELM" template "$RELEASE" "$CHART" --namespace "$NAMESPACE" "$@" >/dev/null 2>"$OUT/neg.err"; then
    bad "$label: rendered, but must fail"
  elif grep -q -- "$want" "$OUT/neg.err"; then
    ok "$label: fails with \"$want\""
  else
    bad "$label: failed without the expected message \"$want\":"; sed 's/^/        /' "$OUT/neg.err" >&2
  fi
}
refuse "certManager off, nothing else" "requires tls.existingSecret" --set certManager.enabled=false
refuse "certManager off, no caBundle" "requires tls.caBundle" --set certManager.enabled=false --set tls.existingSecret=x
refuse "certManager off, no Secret" "requires tls.existingSecret" --set certManager.enabled=false --set tls.caBundle=Y2E=
refuse "failurePolicy enum" "value must be one of 'Fail', 'Ignore'" --set webhook.failurePolicy=Sometimes
refuse "timeoutSeconds > 30" "timeoutSeconds" --set webhook.timeoutSeconds=31
refuse "unknown value" "additional properties 'replicaCount' not allowed" --set replicaCount=3
refuse "veleroHooks enum" "value must be one of 'defer', 'own'" --set config.veleroHooks=mine
refuse "Go duration" "leaseDuration" --set config.leaseDuration=15
refuse "grace period too short" "must be greater than shutdown.delaySeconds + shutdown.graceSeconds" \
  --set terminationGracePeriodSeconds=20
refuse "PDB blocks all evictions" "must be lower than replicas" --set replicas=1

step "NOTES.txt renders (helm install --dry-run=client)"
notes() {
  local label="$1"; shift
  if "$HELM" install "$RELEASE" "$CHART" --namespace "$NAMESPACE" --dry-run=client "$@" >"$OUT/notes.log" 2>&1 \
     && grep -q "^NOTES:" "$OUT/notes.log" && grep -q "failurePolicy is" "$OUT/notes.log"; then
    ok "NOTES ($label)"
  else
    bad "NOTES ($label)"; tail -20 "$OUT/notes.log" | sed 's/^/        /' >&2
  fi
}
notes default
notes no-cert-manager --set certManager.enabled=false --set tls.existingSecret=restore-hooks-tls-manual \
  --set "tls.caBundle=$CABUNDLE"

step "kubernetes-validate --strict ($K8S_VERSIONS)"
for label in default all-on byo-issuer no-cert-manager; do
  for v in $K8S_VERSIONS; do
    if "$KV" -k "$v" --strict --quiet "$OUT/$label.yaml" >"$OUT/kv.log" 2>&1; then
      n_warn=$(grep -c '^WARN' "$OUT/kv.log" || true)
      ok "$label @ $v (CRD-based kinds not schema-checked: $n_warn)"
      grep '^WARN' "$OUT/kv.log" | grep -v "Couldn't find schema for kind \(Certificate\|Issuer\|ServiceMonitor\|PrometheusRule\) " \
        | sed 's/^/        /' || true
    else
      bad "$label @ $v"; grep -v '^WARN' "$OUT/kv.log" | sed 's/^/        /' >&2
    fi
  done
done

step "chart assertions (.ci/chart_assertions.py)"
if "$PY" .ci/chart_assertions.py --rendered "$OUT" --binary "$BIN" --chart "$CHART" \
     --release "$RELEASE" --namespace "$NAMESPACE"; then
  ok "assertions"
else
  bad "assertions"
fi

step "kind e2e sample (e2e/kind/manifests): strict schemas and a dry run through the engine"
for v in $K8S_VERSIONS; do
  if cat e2e/kind/manifests/*.yaml | "$KV" -k "$v" --strict --quiet - >"$OUT/kv.log" 2>&1; then
    ok "manifests @ $v (RestoreHook instances: $(grep -c '^WARN' "$OUT/kv.log" || true) not schema-checked)"
  else
    bad "manifests @ $v"; grep -v '^WARN' "$OUT/kv.log" | sed 's/^/        /' >&2
  fi
done
if "$PY" .ci/e2e_manifest_checks.py "$BIN" e2e/kind/manifests; then
  ok "restore-hooks inject gives the init containers and exec plans run.sh expects"
else
  bad "e2e sample vs engine"
fi

ELAPSED=$(( $(date +%s) - START ))
if [ "$FAILED" -ne 0 ]; then
  printf '\nchart-checks: %d check group(s) FAILED (%ss)\n' "$FAILED" "$ELAPSED" >&2
  exit 1
fi
printf '\nchart-checks: all passed (%ss)\n' "$ELAPSED"
