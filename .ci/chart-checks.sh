#!/usr/bin/env bash
# Offline checks of the Helm chart (charts/restore-hooks). Needs the tools of .ci/install-tools.sh.
#
#   .ci/chart-checks.sh [PATH/TO/restore-hooks]      (default: target/debug/restore-hooks)
#   .ci/chart-checks.sh --no-binary                  (while the server crate does not build: every
#                                                     check that needs the binary is SKIPPED, loudly;
#                                                     the CRDs come from the core crate's example)
#
# 1. files/crds/ holds exactly what `restore-hooks crd` prints, one file per CRD (.ci/gen-crds.sh
#    --check); templates/crds.yaml renders them (crds.enabled), so `helm upgrade` upgrades them.
# 2. helm lint --strict (Helm 4 and Helm 3) with the default values, every ci/*-values.yaml and
#    values-openshift.yaml.
# 3. Renders (helm template --include-crds; Helm 3 must give the same objects) with: defaults (split
#    webhook and controller Deployments); every optional part on (ci/all-on-values.yaml); an own
#    cert-manager issuer (ci/byo-issuer-values.yaml); split with non-default settings
#    (ci/split-values.yaml); one Deployment running serve (ci/single-process-values.yaml,
#    split.enabled=false); everything optional off (minimal); certManager.enabled=false with
#    tls.existingSecret + a real caBundle from certs/make-certs.sh; and the OpenShift preset
#    (values-openshift.yaml, NetworkPolicy on; its restricted-v2 rules: cargo test --test chart).
#    Every render includes the `helm test` and pre-delete hooks (`helm template` prints them).
#    The binary serves those certificates (webhook --no-cluster) and a TLS client verifying the
#    chain and the <svc>.<ns>.svc name gets an AdmissionReview answer (.ci/tls_smoke.py).
# 4. Negative renders: certManager off without caBundle/existingSecret, bad enum, unknown value,
#    too short terminationGracePeriodSeconds, a removed value, clashing names must all fail with a
#    clear message.
# 5. NOTES.txt renders (helm install --dry-run=client).
# 6. Validates every rendered object with kubernetes-validate --strict against the oldest (1.35)
#    and newest (1.37) supported Kubernetes versions (CRD-based kinds only warn).
# 7. .ci/chart_assertions.py: object inventory of every render, the exact flags of every
#    Deployment, both webhooks, namespace exclusions, Pod Security "restricted" by construction,
#    TLS mount, RBAC exactly as listed (and nothing broader), aggregated roles, the admission
#    policies and their bindings, alerts (each with promtool cases), the Grafana dashboard and its
#    ConfigMap, CRDs == `restore-hooks crd`.
# 8. The kind e2e sample manifests: strict schemas, and `restore-hooks inject` on each pod gives
#    what e2e/kind/run.sh expects (.ci/e2e_manifest_checks.py).
# 9. The alerts evaluated: `promtool test rules` of ci/prometheusrule-test.yaml on the rendered
#    PrometheusRule (.ci/promtool-tests.sh; promtool from e2e/realcp/build.sh prometheus, cached).
# The admission policies' behaviour on a real API server: .ci/chart-apiserver-checks.sh (separate).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
CHART="${CHART_DIR:-charts/restore-hooks}"
TOOLS="${TOOLS_DIR:-$ROOT/.tools}"
HELM="$TOOLS/helm/helm"
HELM3="$TOOLS/helm3/helm"
KV="$TOOLS/venv/bin/kubernetes-validate"
PY="$TOOLS/venv/bin/python"
NO_BINARY=0
if [ "${1:-}" = "--no-binary" ]; then NO_BINARY=1; shift; fi
BIN="${1:-target/debug/restore-hooks}"
RELEASE="restore-hooks"
NAMESPACE="restore-hooks"
# Oldest supported (Chart.yaml kubeVersion) and newest schemas shipped by kubernetes-validate.
K8S_VERSIONS="${K8S_VERSIONS:-1.35.0 1.37.0}"
API_VERSIONS=(--api-versions cert-manager.io/v1 --api-versions monitoring.coreos.com/v1)

FAILED=0
step() { printf '\n==> %s\n' "$*"; }
ok() { printf '  ok    %s\n' "$*"; }
bad() { printf '  FAIL  %s\n' "$*" >&2; FAILED=$((FAILED + 1)); }
SKIPS=0
skip() { printf '  SKIP  %s\n' "$*"; SKIPS=$((SKIPS + 1)); }
die() { printf 'chart-checks: %s\n' "$*" >&2; exit 2; }

[ -x "$HELM" ] || die "$HELM missing: run .ci/install-tools.sh"
[ -x "$HELM3" ] || die "$HELM3 missing: run .ci/install-tools.sh"
[ -x "$KV" ] || die "$KV missing: run .ci/install-tools.sh"
[ "$NO_BINARY" = 1 ] || [ -x "$BIN" ] || die "binary $BIN missing: run cargo build (or pass its path, or --no-binary)"
"$HELM" version --short | grep -q '^v4\.1\.4' || die "unexpected helm version: $("$HELM" version --short)"
"$HELM3" version --short | grep -q '^v3\.17\.1' || die "unexpected helm 3 version: $("$HELM3" version --short)"

OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
START=$(date +%s)

if [ "$NO_BINARY" = 1 ]; then BIN_LABEL="none (--no-binary)"; else BIN_LABEL="$BIN"; fi
step "tools: $("$HELM" version --short) and $("$HELM3" version --short), kubernetes-validate $("$KV" --version 2>&1 | tr -d '\n'), binary $BIN_LABEL"
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

step "CRDs: files/crds/ == restore-hooks crd"
if [ "$NO_BINARY" = 1 ]; then
  CRD_SOURCE=(--example)
else
  CRD_SOURCE=("$BIN")
fi
if .ci/gen-crds.sh --check --stdout "${CRD_SOURCE[@]}" >"$OUT/crds.yaml" 2>"$OUT/crds.log"; then
  ok "$(cat "$OUT/crds.log")"
else
  bad "files/crds/ is stale"; sed 's/^/        /' "$OUT/crds.log" >&2
fi
[ "$NO_BINARY" = 1 ] && skip "CRDs taken from the core crate's example (cargo run -p restore-hooks-core --example crds), not the binary"

step "helm lint --strict"
HELM_V="$("$HELM" version --short)" HELM3_V="$("$HELM3" version --short)"
lint() { # both Helm versions side by side
  local label="$1"; shift
  "$HELM3" lint --strict "$CHART" --namespace "$NAMESPACE" "$@" >"$OUT/lint-$label.helm3.log" 2>&1 &
  local pid=$!
  if "$HELM" lint --strict "$CHART" --namespace "$NAMESPACE" "$@" >"$OUT/lint-$label.log" 2>&1; then
    ok "lint ($label, $HELM_V)"
  else
    bad "lint ($label, $HELM_V)"; sed 's/^/        /' "$OUT/lint-$label.log" >&2
  fi
  if wait "$pid"; then
    ok "lint ($label, $HELM3_V)"
  else
    bad "lint ($label, $HELM3_V)"; sed 's/^/        /' "$OUT/lint-$label.helm3.log" >&2
  fi
}
lint default
lint openshift -f "$CHART/values-openshift.yaml"
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
if [ "$NO_BINARY" = 1 ]; then
  skip "TLS smoke (the binary serving make-certs.sh output)"
elif "$PY" .ci/tls_smoke.py "$BIN" "$OUT/certs" "$RELEASE" "$NAMESPACE"; then
  ok "the binary serves make-certs.sh output; TLS verifies against the caBundle and the .svc name"
else
  bad "serving make-certs.sh output with $BIN"
fi
CABUNDLE="$(cat "$OUT/no-cert-manager.cabundle")"
lint no-cert-manager --set certManager.enabled=false --set tls.existingSecret=restore-hooks-tls-manual --set "tls.caBundle=$CABUNDLE"

step "helm template"
render() {
  local label="$1"; shift
  # Helm 3 renders the same values alongside (compared below).
  "$HELM3" template "$RELEASE" "$CHART" --namespace "$NAMESPACE" --include-crds \
    --kube-version 1.35.0 "${API_VERSIONS[@]}" "$@" >"$OUT/$label.helm3.yaml" 2>"$OUT/$label.helm3.err" &
  if "$HELM" template "$RELEASE" "$CHART" --namespace "$NAMESPACE" --include-crds \
       --kube-version 1.35.0 "${API_VERSIONS[@]}" "$@" >"$OUT/$label.yaml" 2>"$OUT/$label.err"; then
    ok "render ($label): $(grep -c '^kind:' "$OUT/$label.yaml") objects"
  else
    bad "render ($label)"; sed 's/^/        /' "$OUT/$label.err" >&2
    : >"$OUT/$label.yaml"
  fi
  wait
}
render default
render all-on -f "$CHART/ci/all-on-values.yaml"
render byo-issuer -f "$CHART/ci/byo-issuer-values.yaml"
render split -f "$CHART/ci/split-values.yaml"
render single-process -f "$CHART/ci/single-process-values.yaml"
# Everything optional off (chart_assertions.py uses the same values).
render minimal --set rbac.create=false --set rbac.aggregateToDefaultRoles=false \
  --set admissionPolicies.hookAuthorsNeedExec.enabled=false --set admissionPolicies.podHookStateControllerOnly.enabled=false \
  --set admissionPolicies.veleroRestoreHookAuthorsNeedExec.enabled=false \
  --set admissionPolicies.namespaceLabelsControllerOnly.enabled=false --set config.labelRestoreNamespaces=false \
  --set webhook.excludeMirrorPods=false --set podDisruptionBudget.enabled=false --set priorityClassName= \
  --set podAntiAffinity=soft --set terminationGracePeriodSeconds=40
render no-cert-manager --set certManager.enabled=false --set tls.existingSecret=restore-hooks-tls-manual \
  --set "tls.caBundle=$CABUNDLE"
render openshift -f "$CHART/values-openshift.yaml" --set networkPolicy.enabled=true
# Helm 3 must render the same objects (it orders kinds differently, so compare as sets).
"$PY" - "$OUT" default all-on byo-issuer split single-process minimal no-cert-manager openshift <<'PY' || FAILED=$((FAILED + 1))
import os, sys, yaml
out, labels = sys.argv[1], sys.argv[2:]
failed = 0
for label in labels:
    a, b = (os.path.join(out, f"{label}{s}.yaml") for s in ("", ".helm3"))
    try:
        docs = [sorted(yaml.safe_dump(d, sort_keys=True) for d in yaml.safe_load_all(open(p)) if d) for p in (a, b)]
        same = bool(docs[0]) and docs[0] == docs[1]
    except Exception as e:  # noqa: BLE001
        same = False
        print(f"        {e}", file=sys.stderr)
    if same:
        print(f"  ok    render ({label}): Helm 3 renders the same objects")
    else:
        failed += 1
        print(f"  FAIL  render ({label}): Helm 3 differs (see {b}, {b[:-5]}.err)", file=sys.stderr)
sys.exit(1 if failed else 0)
PY

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
refuse "veleroServiceAccount not a name" "veleroServiceAccount" --set config.veleroServiceAccount=Velero_SA
refuse "Go duration" "leaseDuration" --set config.leaseDuration=15
refuse "grace period too short" "must be greater than shutdown.delaySeconds + shutdown.graceSeconds" \
  --set terminationGracePeriodSeconds=20
refuse "grace period too short (single-process)" "must be greater than shutdown.delaySeconds + shutdown.graceSeconds" \
  --set split.enabled=false --set terminationGracePeriodSeconds=25
refuse "PDB blocks all evictions" "must be lower than replicas" --set replicas=1
refuse "removed value" "config.maxConcurrentPods was renamed to config.maxConcurrentExecs" --set config.maxConcurrentPods=8
refuse "longestExecTimeout not h/m/s" "longestExecTimeout" --set controller.longestExecTimeout=1.5h
refuse "maxExecTimeout not h/m/s" "maxExecTimeout" --set config.maxExecTimeout=90
refuse "lateHookWindow not a duration" "lateHookWindow" --set config.lateHookWindow=soon
refuse "matchCondition name clash" "exclude-mirror-pods is the chart's own condition" \
  --set 'webhook.matchConditions[0].name=exclude-mirror-pods' --set-string 'webhook.matchConditions[0].expression=true'
refuse "split (default), no webhook ServiceAccount" "serviceAccount.webhookName is required" \
  --set serviceAccount.create=false --set serviceAccount.name=existing
refuse "split, one ServiceAccount for both" "must run under different ServiceAccounts" \
  --set split.enabled=true --set serviceAccount.name=rh --set serviceAccount.webhookName=rh
refuse "maxConcurrentExecsPerNamespace < 1" "maxConcurrentExecsPerNamespace" --set config.maxConcurrentExecsPerNamespace=0
refuse "tests.namespace not a name" "namespace" --set tests.namespace=Not_A_Name
refuse "networkPolicy.dns.ports empty" "ports" --set-json 'networkPolicy.dns.ports=[]' --set networkPolicy.enabled=true

step "NOTES.txt renders (helm install --dry-run=client)"
notes() {
  local label="$1"; shift
  if "$HELM" install "$RELEASE" "$CHART" --namespace "$NAMESPACE" --dry-run=client "$@" >"$OUT/notes.log" 2>&1 \
     && grep -q "^NOTES:" "$OUT/notes.log" && grep -q "While no replica answers, pods Velero creates are" "$OUT/notes.log"; then
    ok "NOTES ($label)"
  else
    bad "NOTES ($label)"; tail -20 "$OUT/notes.log" | sed 's/^/        /' >&2
  fi
}
notes default
notes split -f "$CHART/ci/split-values.yaml"
notes single-process -f "$CHART/ci/single-process-values.yaml"
notes no-cert-manager --set certManager.enabled=false --set tls.existingSecret=restore-hooks-tls-manual \
  --set "tls.caBundle=$CABUNDLE"

step "kubernetes-validate --strict ($K8S_VERSIONS)"
RENDERS="default all-on byo-issuer split single-process minimal no-cert-manager openshift"
# One process per render and version, run side by side (each spends most of its time loading schemas).
for label in $RENDERS; do
  for v in $K8S_VERSIONS; do
    ( "$KV" -k "$v" --strict --quiet "$OUT/$label.yaml" >"$OUT/kv-$label-$v.log" 2>&1; echo $? >"$OUT/kv-$label-$v.rc" ) &
  done
done
wait
for label in $RENDERS; do
  for v in $K8S_VERSIONS; do
    log="$OUT/kv-$label-$v.log"
    if [ "$(cat "$OUT/kv-$label-$v.rc")" = 0 ]; then
      n_warn=$(grep -c '^WARN' "$log" || true)
      ok "$label @ $v (CRD-based kinds not schema-checked: $n_warn)"
      grep '^WARN' "$log" | grep -v "Couldn't find schema for kind \(Certificate\|Issuer\|ServiceMonitor\|PrometheusRule\) " \
        | sed 's/^/        /' || true
    else
      bad "$label @ $v"; grep -v '^WARN' "$log" | sed 's/^/        /' >&2
    fi
  done
done

step "chart assertions (.ci/chart_assertions.py)"
if [ "$NO_BINARY" = 1 ]; then
  ASSERT_SOURCE=(--crds "$OUT/crds.yaml")
  skip "flags not checked against restore-hooks <serve|webhook|controller> --help, nor parsed by the binary"
else
  ASSERT_SOURCE=(--binary "$BIN")
fi
if "$PY" .ci/chart_assertions.py --rendered "$OUT" "${ASSERT_SOURCE[@]}" --chart "$CHART" \
     --release "$RELEASE" --namespace "$NAMESPACE"; then
  ok "assertions"
else
  bad "assertions"
fi

step "kind e2e sample (e2e/kind/manifests): strict schemas and a dry run through the engine"
for v in $K8S_VERSIONS; do
  # A `---` between files: plain cat would merge each file's last document with the next file's first.
  if for f in e2e/kind/manifests/*.yaml; do echo '---'; cat "$f"; done \
       | "$KV" -k "$v" --strict --quiet - >"$OUT/kv.log" 2>&1; then
    ok "manifests @ $v (RestoreHook instances: $(grep -c '^WARN' "$OUT/kv.log" || true) not schema-checked)"
  else
    bad "manifests @ $v"; grep -v '^WARN' "$OUT/kv.log" | sed 's/^/        /' >&2
  fi
done
if [ "$NO_BINARY" = 1 ]; then
  skip "restore-hooks inject on the e2e sample pods"
elif "$PY" .ci/e2e_manifest_checks.py "$BIN" e2e/kind/manifests; then
  ok "restore-hooks inject gives the init containers and exec plans run.sh expects"
else
  bad "e2e sample vs engine"
fi

step "the alerts under promtool (.ci/promtool-tests.sh)"
if bash .ci/promtool-tests.sh >"$OUT/promtool.log" 2>&1; then
  ok "$(grep -c '^  - name: ' "$CHART/ci/prometheusrule-test.yaml") promtool test groups pass on the rendered alerts ($(grep -m1 '^promtool, version' "$OUT/promtool.log" | cut -d' ' -f3))"
else
  bad "promtool tests of the alerts"; sed 's/^/        /' "$OUT/promtool.log" >&2
fi

ELAPSED=$(( $(date +%s) - START ))
if [ "$FAILED" -ne 0 ]; then
  printf '\nchart-checks: %d check group(s) FAILED (%ss)\n' "$FAILED" "$ELAPSED" >&2
  exit 1
fi
if [ "$SKIPS" -ne 0 ]; then
  printf '\nchart-checks: all run checks passed, %d SKIPPED for want of a binary (%ss)\n' "$SKIPS" "$ELAPSED"
  exit 0
fi
printf '\nchart-checks: all passed (%ss)\n' "$ELAPSED"
