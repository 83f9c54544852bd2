#!/usr/bin/env bash
# Release checks, in seconds (needs the tools of .ci/install-tools.sh): actionlint (with shellcheck)
# over .github/workflows, shellcheck over the release scripts, then .ci/release_checks.py: first
# its self-test (each way of breaking the release metadata is caught), then the repository itself.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="${TOOLS_DIR:-$PWD/.tools}"
die() { printf 'release-checks: %s\n' "$*" >&2; exit 1; }
[ -x "$TOOLS/actionlint/actionlint" ] || die "$TOOLS/actionlint/actionlint missing: run .ci/install-tools.sh"
command -v shellcheck >/dev/null || die "shellcheck missing: run .ci/install-tools.sh"

"$TOOLS/actionlint/actionlint" -shellcheck shellcheck .github/workflows/*.yml
echo "actionlint: .github/workflows ok"
shellcheck .ci/cross-build.sh .ci/release-checks.sh
echo "shellcheck: .ci/cross-build.sh .ci/release-checks.sh ok"
"$TOOLS/venv/bin/python" .ci/release_checks.py --self-test
"$TOOLS/venv/bin/python" .ci/release_checks.py
