#!/usr/bin/env bash
# Bounded fuzzing of every cargo-fuzz target, starting from the seed corpus in fuzz/corpus/.
#   FUZZ_SECONDS   time per target (default 60)
#   FUZZ_SEED      libFuzzer's -seed (default 1; 0 picks a random seed, for exploratory runs)
# With a fixed seed a CI run replays the same mutation sequence every time, so CI is red only
# when a change makes an input of that sequence fail, not because a new random walk got lucky;
# run longer or with FUZZ_SEED=0 locally to explore further.
# New inputs go to a scratch directory, so a local run does not litter fuzz/corpus/; a crash
# leaves its input in fuzz/artifacts/TARGET/ and fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_FUZZ_VERSION="0.13.2"
SECONDS_PER_TARGET="${FUZZ_SECONDS:-60}"
SEED="${FUZZ_SEED:-1}"

if ! cargo fuzz --version 2>/dev/null | grep -q " ${CARGO_FUZZ_VERSION}\$"; then
  echo "[fuzz] installing cargo-fuzz ${CARGO_FUZZ_VERSION}"
  cargo install cargo-fuzz --locked --version "${CARGO_FUZZ_VERSION}"
fi

# cargo-fuzz passes -Z flags to rustc; this machine has only the stable toolchain.
export RUSTC_BOOTSTRAP=1
# No sanitizer: the code forbids `unsafe`, so ASan would only slow the build and the runs; the
# targets look for panics and broken invariants (a patch that does not apply, or is not
# idempotent), which libFuzzer reports without one.
SANITIZER=(--sanitizer none)

cargo fuzz build "${SANITIZER[@]}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for target in $(cargo fuzz list); do
  echo "[fuzz] ${target}: ${SECONDS_PER_TARGET} s, seed ${SEED}"
  mkdir -p "$scratch/$target"
  log="$scratch/$target.log"
  status=0
  cargo fuzz run "${SANITIZER[@]}" "$target" "$scratch/$target" "fuzz/corpus/$target" -- \
    -max_total_time="${SECONDS_PER_TARGET}" -seed="${SEED}" -print_final_stats=1 >"$log" 2>&1 || status=$?
  grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb|INFO: seed corpus)' "$log" || true
  if [ "$status" -ne 0 ]; then
    tail -n 60 "$log" >&2
    echo "[fuzz] ${target} FAILED (exit ${status}); the input is in fuzz/artifacts/${target}/" >&2
    exit "$status"
  fi
done
echo "[fuzz] all targets ran ${SECONDS_PER_TARGET} s without a finding"
