#!/usr/bin/env bash
# Regenerates every committed output of the repository that the build writes, in place, with
# the commands that wrote it, so that
#
#     scripts/regen-reports.sh && git diff --exit-code
#
# proves that a change moved no number (or shows exactly what moved). Run it after any change to
# the models, the kernel fit or the profiles, and after merging branches: committed generated
# files are regenerated, never hand-merged. `--check` does both steps and exits 1 when a file
# differs from the committed one (the list is printed).
#
# What it writes, in dependency order (each from committed inputs only; nothing else is touched):
#   1. hardware-profiles/measurements/h200-2026-11-30-{fit,held-out}.json — the shared H200 file
#      and the GPU check's PyTorch run joined (`gpu-check merge`), every 4th entry of each kind
#      held out (`gpu-check split`); README "Calibration".
#   2. hardware-profiles/dgx-h100.json — its kernel figures derived from hgx-h200's
#      (scripts/derive-dgx-h100.py; needs python3). hgx-h200's own kernel model is an input: it is
#      the refit "to within 2% per parameter" (README), not a byte-exact output of one command.
#   3. the attention implementations and the MI300X/MI325X/B200/GB200 kernel models derived from
#      published measurements with metp-sim's own fitter (scripts/derive-kernel-models.py: the
#      profiles it names and hardware-profiles/measurements/*-published.json it writes).
#   4. reports/gpu/nvidia-h200-2026-11-30/profile-units.json — `calibrate --fit` of run 2's
#      measurements onto hgx-h200 (the profile the units-only GPU check predicts with;
#      tests/it/gpu_data.rs checks it figure by figure).
#   5. reports/kernels/metp-llama2-7b-h200.json — `kernels --hw hgx-h200 --input
#      reports/kernels/metp-llama2-7b-shapes.json --format json` (tests/it/kernels.rs, byte for
#      byte; the shape list is an input).
#   5b. the derived profiles and the generated run files (8 and 9 below), then
#      kernels.gemm.fleet_clock_spread of dgx-h100 and gb200-nvl72 — fitted to the published runs
#      that differ only in data-parallel replicas, predicted without it
#      (scripts/derive-fleet-clock-spread.py: one `validate --runs` of its own, about two minutes
#      in a release build) — and the profiles derived from those two again.
#   6. tests/data/baseline/*.sweep.json — `sweep --hw H --seq 4k,64k --p 2,8` for the five
#      8-GPU profiles and `--hw dgx-h100 --nodes 2 --p 16 --seq 64k` (tests/it/fabric.rs).
#   7. reports/claims/ — `validate` with its defaults, run from the repository root
#      (tests/it/validate.rs, byte for byte).
#   8. hardware-profiles/grand-teton-h100-roce.json — dgx-h100's GPU, kernels and NVLink with
#      Llama 3's RoCE fabric (scripts/derive-grand-teton.py; after 2 and 3, before 7), and
#      hardware-profiles/a100-jean-zay-opa.json — dgx-a100-80gb's with Jean Zay's Omni-Path
#      fabric (scripts/derive-jean-zay.py; after 3, before 7), and
#      hardware-profiles/gb200-nvl72-seg64.json — gb200-nvl72's racks as 64-GPU NVLink segments
#      (scripts/derive-gb200-segments.py; after 3, before 7).
#   9. runs/nvidia-dgxc-*-fp8-*.json — the FP8 twins of the DGX Cloud Benchmarking H100 run
#      files, from their bf16 run files and the FP8 tables' figures
#      (scripts/write-dgxc-fp8-runs.py), and runs/nemo-2407-*.json with their models — NeMo 24.07's
#      FP8 pre-training table (scripts/write-nemo-2407-runs.py), runs/nemo-2502-b200-*.json —
#      NeMo 25.02's DGX B200 FP8 table (scripts/write-nemo-2502-b200-runs.py), and
#      runs/nemo-long-*.json — NeMo's long-sequence tables, Llama 2 7B on H100 and Llama 3 8B on
#      B200 from 4K to 1M tokens
#      (scripts/write-nemo-long-context-runs.py).
#  10. reports/runs/ — `validate --runs` (every published run simulated: about two minutes in a
#      debug build), README's published-runs table copied from its runs.md, and
#      tests/data/runs-22b/ — `validate --runs` on a folder holding the two 22B run files
#      (tests/it/runs.rs).
# Not regenerated here: the README's Limits and Layout tables (tests check them against
# src/config/limits.rs and the module docs, and print the expected table when they differ),
# and the records of GPU runs under reports/gpu/*/run* (they need the GPU).
#
# Usage: scripts/regen-reports.sh [--release] [--check]
#   --release  build and use the release binary (default: debug, which is fast enough here:
#              about half a minute in all on two cores once built)
#   --check    afterwards, `git diff --exit-code` over the files above (and no new files)
set -euo pipefail
cd "$(dirname "$0")/.."

profile=debug
check=0
for a in "$@"; do
    case "$a" in
    --release) profile=release ;;
    --check) check=1 ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "regen-reports.sh: unknown argument '$a' (try --help)" >&2
        exit 2
        ;;
    esac
done

if [ "$profile" = release ]; then
    cargo build --quiet --release --bin metp-sim
else
    cargo build --quiet --bin metp-sim
fi
bin="$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/$profile/metp-sim"
command -v python3 >/dev/null || {
    echo "regen-reports.sh: python3 is needed for scripts/derive-dgx-h100.py" >&2
    exit 1
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
say() { printf '== %s\n' "$*"; }
# Runs a command quietly; on failure shows its output and stops.
quiet() {
    if ! "$@" >"$tmp/log" 2>&1; then
        cat "$tmp/log" >&2
        echo "regen-reports.sh: failed: $*" >&2
        exit 1
    fi
}

meas=hardware-profiles/measurements
gpu=reports/gpu/nvidia-h200-2026-11-30
say "$meas/h200-2026-11-30-{fit,held-out}.json (gpu-check merge, split)"
quiet "$bin" gpu-check merge "$meas/h200-pytorch-2026-11-30.json" "$gpu/run2/pytorch-kernels.json" \
    --out "$tmp/h200-all.json"
quiet "$bin" gpu-check split --input "$tmp/h200-all.json" --every 4 \
    --fit "$tmp/h200-fit.json" --held-out "$tmp/h200-held-out.json"
cp "$tmp/h200-fit.json" "$meas/h200-2026-11-30-fit.json"
cp "$tmp/h200-held-out.json" "$meas/h200-2026-11-30-held-out.json"

say "hardware-profiles/dgx-h100.json (scripts/derive-dgx-h100.py)"
quiet python3 scripts/derive-dgx-h100.py

say "attention implementations, MI300X/MI325X/B200/GB200 kernel models (scripts/derive-kernel-models.py)"
quiet env METP_SIM="$bin" python3 scripts/derive-kernel-models.py

say "$gpu/profile-units.json (calibrate --fit)"
quiet "$bin" calibrate --fit "$gpu/run2/measurements-fit.json" --base hgx-h200 \
    --out "$tmp/profile-units.json"
cp "$tmp/profile-units.json" "$gpu/profile-units.json"

say "reports/kernels/metp-llama2-7b-h200.json (kernels)"
"$bin" kernels --hw hgx-h200 --input reports/kernels/metp-llama2-7b-shapes.json --format json \
    >"$tmp/kernels.json" 2>"$tmp/log" || {
    cat "$tmp/log" >&2
    exit 1
}
cp "$tmp/kernels.json" reports/kernels/metp-llama2-7b-h200.json

say "hardware-profiles/grand-teton-h100-roce.json (scripts/derive-grand-teton.py)"
quiet python3 scripts/derive-grand-teton.py
say "hardware-profiles/a100-jean-zay-opa.json (scripts/derive-jean-zay.py)"
quiet python3 scripts/derive-jean-zay.py
say "hardware-profiles/gb200-nvl72-seg64.json (scripts/derive-gb200-segments.py)"
quiet python3 scripts/derive-gb200-segments.py

say "runs/nvidia-dgxc-*-fp8-*.json (scripts/write-dgxc-fp8-runs.py)"
quiet python3 scripts/write-dgxc-fp8-runs.py
say "runs/nemo-2407-*.json (scripts/write-nemo-2407-runs.py)"
quiet python3 scripts/write-nemo-2407-runs.py
say "runs/nemo-2502-b200-*.json (scripts/write-nemo-2502-b200-runs.py)"
quiet python3 scripts/write-nemo-2502-b200-runs.py
say "runs/nemo-long-*.json (scripts/write-nemo-long-context-runs.py)"
quiet python3 scripts/write-nemo-long-context-runs.py

say "kernels.gemm.fleet_clock_spread of dgx-h100 and gb200-nvl72 (scripts/derive-fleet-clock-spread.py)"
quiet env METP_SIM="$bin" python3 scripts/derive-fleet-clock-spread.py
say "the profiles derived from them again (derive-grand-teton.py, derive-gb200-segments.py)"
quiet python3 scripts/derive-grand-teton.py
quiet python3 scripts/derive-gb200-segments.py

say "tests/data/baseline/*.sweep.json (sweep)"
base=tests/data/baseline
for hw in dgx-a100-40gb dgx-a100-80gb a100-80gb-pcie dgx-h100 hgx-h200; do
    quiet "$bin" sweep --hw "$hw" --seq 4k,64k --p 2,8 --svg-only --out "$tmp/sweep-$hw"
    cp "$tmp/sweep-$hw/sweep.json" "$base/$hw.sweep.json"
done
quiet "$bin" sweep --hw dgx-h100 --nodes 2 --p 16 --seq 64k --svg-only --out "$tmp/sweep-2nodes"
cp "$tmp/sweep-2nodes/sweep.json" "$base/dgx-h100-2nodes.sweep.json"

say "reports/claims/ (validate)"
quiet "$bin" validate

say "reports/runs/ (validate --runs), README's published-runs table, tests/data/runs-22b/"
quiet "$bin" validate --runs
quiet python3 - <<'PY'
import pathlib
md = pathlib.Path("reports/runs/runs.md").read_text()
t0 = md.index("| run | GPUs |")
table = md[t0:md.index("\n\n", t0) + 1]
readme = pathlib.Path("README.md")
s = readme.read_text()
b = s.index("<!-- runs-table:begin -->\n") + len("<!-- runs-table:begin -->\n")
e = s.index("<!-- runs-table:end -->")
readme.write_text(s[:b] + table + s[e:])
PY
# A fixed input folder (ignored by git), so that the fixture's manifest names the same command.
rm -rf target/regen/runs-22b tests/data/runs-22b
mkdir -p target/regen/runs-22b
cp runs/korthikanti-2022-22b-*.json target/regen/runs-22b/
quiet "$bin" validate --runs target/regen/runs-22b --out tests/data/runs-22b

if [ "$check" = 1 ]; then
    paths=("$meas"/*.json hardware-profiles/*.json "$gpu/profile-units.json"
        reports/kernels/metp-llama2-7b-h200.json "$base" reports/claims reports/runs
        runs tests/data/runs-22b README.md)
    new=$(git ls-files --others --exclude-standard -- "${paths[@]}")
    if ! git diff --exit-code --stat -- "${paths[@]}" || [ -n "$new" ]; then
        [ -n "$new" ] && printf 'new, not committed: %s\n' $new
        echo "regen-reports.sh: the regenerated outputs differ from the committed ones" >&2
        exit 1
    fi
    say "every regenerated output is byte-identical to the committed one"
fi
