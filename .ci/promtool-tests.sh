#!/usr/bin/env bash
# The chart's alerts, evaluated: `promtool test rules` of charts/restore-hooks/ci/prometheusrule-test.yaml
# against the rules the chart renders (metrics.prometheusRule.enabled=true, every other value at
# its default: split mode, a 256Mi memory limit), with the promtool built from the pinned
# Prometheus module (e2e/realcp/prometheus/go.mod, by e2e/realcp/build.sh, cached).
#
#   .ci/promtool-tests.sh [--run REGEX]    (REGEX: only the test groups whose names match)
#
# 1. helm template ... --show-only templates/prometheusrule.yaml; its spec.groups are written to
#    a rule file (what prometheus-operator hands Prometheus).
# 2. promtool check rules on it: it parses, every expression is valid PromQL, every template
#    of the annotations parses.
# 3. promtool test rules: per alert, input series and the alerts expected at given times,
#    firing ones with their labels and annotations as rendered, and times when none may fire.
# chart_assertions.py fails when an alert of the chart has no test here that expects it to fire
# and none that expects it not to.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
CHART="${CHART_DIR:-charts/restore-hooks}"
TOOLS="${TOOLS_DIR:-$ROOT/.tools}"
HELM="$TOOLS/helm/helm"
PY="$TOOLS/venv/bin/python"
TESTS="$CHART/ci/prometheusrule-test.yaml"
die() { printf 'promtool-tests: %s\n' "$*" >&2; exit 2; }

[ -x "$HELM" ] || die "$HELM missing: run .ci/install-tools.sh"
[ -x "$PY" ] || die "$PY missing: run .ci/install-tools.sh"
[ -f "$TESTS" ] || die "$TESTS missing"

bash e2e/realcp/build.sh --quiet prometheus || die "building promtool failed (output above)"
PROMTOOL="${RESTORE_HOOKS_REALCP_CACHE:-$HOME/.cache/restore-hooks-realcp}/bin/promtool"
[ -x "$PROMTOOL" ] || die "$PROMTOOL missing after e2e/realcp/build.sh prometheus"

OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

# The rule file sits next to a copy of the tests: promtool resolves rule_files relative to the
# test file.
"$HELM" template restore-hooks "$CHART" --namespace restore-hooks \
  --api-versions monitoring.coreos.com/v1 \
  --set metrics.prometheusRule.enabled=true \
  --show-only templates/prometheusrule.yaml >"$OUT/prometheusrule.yaml"
"$PY" - "$OUT/prometheusrule.yaml" "$OUT/restore-hooks.rules.yaml" <<'PY'
import sys, yaml
rule = yaml.safe_load(open(sys.argv[1]))
assert rule["kind"] == "PrometheusRule", rule["kind"]
with open(sys.argv[2], "w") as f:
    yaml.safe_dump({"groups": rule["spec"]["groups"]}, f, sort_keys=False, width=1 << 20)
PY
cp "$TESTS" "$OUT/tests.yaml"

"$PROMTOOL" --version | head -1
"$PROMTOOL" check rules "$OUT/restore-hooks.rules.yaml"
run=()
if [ "${1:-}" = "--run" ]; then run=(--run "$2"); fi
"$PROMTOOL" test rules "${run[@]}" "$OUT/tests.yaml"
