#!/usr/bin/env bash
# GPU check of metp-sim's CUDA backend in under 5 minutes on one GPU (so that a short slot on a
# GPU machine is enough to check, fix and check again). Every step has its own time limit, no
# step's failure stops the others, and the whole script stops itself before 300 s:
#
#   1. stops at once, with the reason, when this machine has no usable NVIDIA GPU;
#   2. finds the CUDA 12 or 13 libraries cudarc loads by name — libcuda, libnvrtc, libcublas,
#      libcublasLt, libnccl — in the CUDA toolkit folders, the driver's folder, pip wheels'
#      nvidia/*/lib and the loader cache, under versioned names too (libcublas.so.13,
#      libnccl.so.2, …), and puts unversioned links to them in a temporary folder first on
#      LD_LIBRARY_PATH (the binary uses cudarc's cuda-12080 bindings, which look up `libX.so`
#      before `libX.so.12` and never `libX.so.13` or `libnccl.so.2`);
#   3. uses prebuilt binaries (METP_SIM_BIN: metp-sim built with --features cuda;
#      METP_SIM_TEST_BIN: the tests/it binary of `cargo test --release --features cuda --test it
#      --no-run`), or builds them when cargo is here;
#   4. runs the GPU tests (tests/it/gpu.rs), each in its own process;
#   5a. runs `python3 scripts/gpu-kernels.py` (PyTorch's cuBLAS and FlashAttention kernels at
#      METP's shapes: the kernel model's held-out data) when torch imports and the script exists;
#      with --gpus N (N >= 2) instead `torchrun --nproc_per_node N scripts/gpu-dist.py`: NCCL
#      ring steps at METP's message sizes, all-gather / reduce-scatter at TP-SP's sizes, and the
#      kernels of every GPU (rank 0: the same set as gpu-kernels.py) into dist-measurements.json,
#      dist-gemm-per-gpu.json and nccl-tests-style logs; `calibrate --fit` then fits a profile
#      (links included) from it: profile-dist.json, and `calibrate --fit-links` the link
#      figures from the logs: profile-dist-links.json;
#   5. calibrates: `calibrate --backend cuda` measures the kernel grid into
#      <profile>.measurements.json, writes a profile, runs METP and TP, attention and MLP, forward
#      and backward, at LLaMA-2 7B/13B layer sizes, within a time budget sized to what is left;
#   6. splits the measurements (every 4th entry of each kind held out: `metp-sim gpu-check
#      split`), refits on the rest (`calibrate --fit`) and prices the held-out entries
#      (`kernels --compare`); a build without those subcommands logs them as skipped;
#   7. if time is left, runs the units again with the refitted profile (`run --hw`), and METP
#      grouped-query attention (LLaMA-3 8B's: 32 query heads on 8 K/V heads);
#   9. ends with ONE table (`metp-sim gpu-check table`): per kernel kind, the median and largest
#      |error| of the refitted profile on the held-out measurements; per unit, predicted against
#      measured time and memory.
#
#   10. with GPU_CHECK_PACK=1, packs every output into gpu-check.tgz (for harnesses that bring
#      back only a few files).
#
# GPU_CHECK_ONLY=units (about 2 minutes, only METP_SIM_BIN needed): steps 1-3, then only the
# units — METP and TP, attention and MLP, forward and backward, LLaMA-2 7B (s/p = 2048), METP
# attention and MLP of LLaMA-2 13B (s/p = 1024), and METP and TP grouped-query attention of
# LLaMA-3 8B (32 query heads on 8 K/V heads, s/p = 2048), 4 virtual devices on GPU 0 (or the GPUs when
# there are 2, 4 or 8) — each predicted with the committed profile GPU_CHECK_PROFILE (default
# reports/gpu/nvidia-h200-2026-11-30/profile-units.json: the kernel model fitted to run 2's
# CUDA measurements, fit part), then the table and the packing. Outputs go to $OUT if set, else
# reports/gpu/<gpu>-<date>/units/.
#
# GPU_CHECK_ONLY=dist (at most 150 s for torchrun plus the fits, METP_SIM_BIN for them;
# --gpus N, N >= 2): steps 1-3, the torchrun measurement and its fits, nothing else.
#
# Usage: scripts/gpu-check.sh [--gpus N]. --gpus N (default 1) uses the first N GPUs: with
# N >= 2 the torchrun measurement runs (step 5a) and the units and `calibrate` run on N devices
# when N is 2, 4 or 8 (one per GPU, the Rust NCCL path); it stops at once when fewer than N GPUs
# are listed. Without --gpus the units use the GPUs when there are 2, 4 or 8, else 4 virtual
# devices on GPU 0, as before.
#
# GPU_CHECK_HARD_S (default 285) sets the hard stop. Outputs go to $OUT if set, else
# reports/gpu/<gpu>-<date>/. Exit status: 0 when every step
# that ran passed, 1 otherwise (summary.txt says which).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
START=$SECONDS
HARD=${GPU_CHECK_HARD_S:-285} # seconds: the script ends before this

say() { echo "gpu-check: $*" | tee -a "$SUMMARY"; }
die() {
    echo "gpu-check: FAILED: $*" | tee -a "$SUMMARY" >&2
    exit 1
}
left() { echo $((HARD - (SECONDS - START))); }

usage() { echo "usage: scripts/gpu-check.sh [--gpus N]   (see the comment at its top)" >&2; exit 2; }
WANT=1
while (($#)); do
    case "$1" in
    --gpus)
        [[ "${2:-}" =~ ^[1-9][0-9]?$ ]] || { echo "gpu-check: --gpus needs a GPU count from 1 to 99, got '${2:-}'" >&2; usage; }
        WANT=$2
        shift 2
        ;;
    --gpus=*)
        v=${1#--gpus=}
        [[ "$v" =~ ^[1-9][0-9]?$ ]] || { echo "gpu-check: --gpus needs a GPU count from 1 to 99, got '$v'" >&2; usage; }
        WANT=$v
        shift
        ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1'" >&2; usage ;;
    esac
done

# ---- 1. A GPU, or stop here -------------------------------------------------------------
SUMMARY=/dev/null
if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu-check: FAILED: no nvidia-smi: this machine has no NVIDIA driver, so no GPU to check" >&2
    exit 1
fi
if ! GPUS=$(nvidia-smi -L 2>&1) || ! grep -q '^GPU 0' <<<"$GPUS"; then
    echo "gpu-check: FAILED: nvidia-smi lists no usable GPU: $(head -n 1 <<<"$GPUS")" >&2
    exit 1
fi
NGPU=$(grep -c '^GPU ' <<<"$GPUS")
GPUNAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
SLUG=$(tr '[:upper:] ' '[:lower:]-' <<<"${GPUNAME:-gpu}" | tr -cd 'a-z0-9-')
ONLY="${GPU_CHECK_ONLY:-}"
case "$ONLY" in
"") OUT="${OUT:-reports/gpu/${SLUG}-$(date -u +%Y-%m-%d)}" ;;
units | dist) OUT="${OUT:-reports/gpu/${SLUG}-$(date -u +%Y-%m-%d)/$ONLY}" ;;
*)
    echo "gpu-check: FAILED: GPU_CHECK_ONLY='$ONLY': the modes are 'units' and 'dist' (unset: the whole check)" >&2
    exit 2
    ;;
esac
if ((WANT > NGPU)); then
    echo "gpu-check: FAILED: --gpus $WANT, but nvidia-smi lists $NGPU GPU(s)" >&2
    exit 1
fi
if [ "$ONLY" = dist ] && ((WANT < 2)); then
    echo "gpu-check: FAILED: GPU_CHECK_ONLY=dist measures between GPUs: give --gpus N with N >= 2" >&2
    exit 2
fi
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
echo "$GPUS" >"$OUT/nvidia-smi-L.txt"
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || true
say "found $NGPU GPU(s): $(head -n 1 <<<"$GPUS"); using $WANT (--gpus)"

FAILED=0
# step NAME LIMIT_S CMD... : runs CMD with a time limit (never past the hard stop), output to
# $OUT/NAME.log; records pass or fail; never stops the script.
step() {
    local name=$1 limit=$2
    shift 2
    local l
    l=$(($(left) - 3))
    if ((l < 5)); then
        say "$name: skipped (time is up)"
        FAILED=1
        return 1
    fi
    ((limit > l)) && limit=$l
    say "$name: running (limit ${limit}s, $((SECONDS - START))s elapsed)"
    local t0=$SECONDS rc=0
    timeout --kill-after=5 "$limit" "$@" >"$OUT/$name.log" 2>&1 || rc=$?
    if ((rc == 0)); then
        say "$name: ok in $((SECONDS - t0))s"
        return 0
    fi
    if ((rc == 124 || rc == 137)); then
        say "$name: FAILED: killed at its ${limit}s limit (see $name.log)"
    else
        say "$name: FAILED (exit $rc; see $name.log): $(grep -v '^\s*$' "$OUT/$name.log" | tail -n 1)"
    fi
    FAILED=1
    return 1
}

# An optional step: a missing subcommand or flag (clap's usage error) is logged as skipped.
optional() {
    local name=$1
    if step "$@"; then return 0; fi
    if grep -qE "unrecognized subcommand|unexpected argument|unknown argument" "$OUT/$name.log" 2>/dev/null; then
        say "$name: skipped: this build of metp-sim does not have it ($(grep -m1 -E 'unrecognized|unexpected|unknown' "$OUT/$name.log"))"
        FAILED=$SAVED_FAILED
    fi
    return 1
}

# ---- 2. Libraries (CUDA 12 or 13) ----------------------------------------------------------
# torch brings its own CUDA libraries (its wheels' RUNPATH): torchrun gets the loader path as
# it was, so that the links below do not swap another libnccl or libcublas under it.
ORIG_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
LIBTMP=$(mktemp -d)
trap 'rm -rf "$LIBTMP"' EXIT
DIRS=()
add_dir() { [ -d "$1" ] && DIRS+=("$1"); }
add_dir /usr/local/cuda/lib64
add_dir /usr/local/cuda/targets/x86_64-linux/lib
for d in /usr/local/cuda-13*/lib64 /usr/local/cuda-13*/targets/x86_64-linux/lib \
    /usr/local/cuda-12*/lib64 /usr/local/cuda-12*/targets/x86_64-linux/lib; do add_dir "$d"; done
add_dir /usr/lib/x86_64-linux-gnu
add_dir /usr/lib64
add_dir /usr/lib/wsl/lib
IFS=: read -r -a ENV_DIRS <<<"${LD_LIBRARY_PATH:-}"
for d in "${ENV_DIRS[@]}"; do [ -n "$d" ] && add_dir "$d"; done
# Libraries shipped in Python wheels (nvidia-cublas-cu12, nvidia-nccl-cu13, nvidia/cu13/lib, …).
for sp in $(python3 -c 'import site, sys; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null); do
    for d in "$sp"/nvidia/*/lib "$sp"/nvidia/cu1*/lib; do add_dir "$d"; done
done
: >"$OUT/libs.txt"
find_lib() { # prints the first file for lib$1 in the folders, newest major first
    local lib=$1 d f
    for d in "${DIRS[@]}"; do
        for f in "$d/lib$lib.so" "$d"/lib"$lib".so.13* "$d"/lib"$lib".so.12* "$d"/lib"$lib".so.2* "$d"/lib"$lib".so.1*; do
            [ -e "$f" ] && { echo "$f"; return 0; }
        done
    done
    # The loader cache (the driver's libcuda is usually only there).
    f=$(ldconfig -p 2>/dev/null | awk -v l="lib$lib.so" '$1 ~ "^"l {print $NF; exit}')
    [ -n "$f" ] && [ -e "$f" ] && { echo "$f"; return 0; }
    return 1
}
for lib in cuda nvrtc nvrtc-builtins cublas cublasLt nccl; do
    if f=$(find_lib "$lib"); then
        real=$(readlink -f "$f")
        echo "lib$lib: $f -> $real" >>"$OUT/libs.txt"
        ln -sf "$real" "$LIBTMP/lib$lib.so"
        # The library's own folder too (NVRTC loads libnvrtc-builtins next to it).
        DIRS=("$(dirname "$real")" "${DIRS[@]}")
    else
        echo "lib$lib: not found" >>"$OUT/libs.txt"
    fi
done
LIBPATH="$LIBTMP"
declare -A SEEN=()
for d in "${DIRS[@]}"; do
    [ -n "${SEEN[$d]:-}" ] && continue
    SEEN[$d]=1
    LIBPATH="$LIBPATH:$d"
done
export LD_LIBRARY_PATH="$LIBPATH"
# The backend allocates from stream-ordered pools, which grant no peer access: NCCL must not
# read another GPU's user buffer directly within one process (the backend sets it too).
export NCCL_P2P_DIRECT_DISABLE=1
say "libraries: $(tr '\n' ';' <"$OUT/libs.txt")"
grep -q '^libnccl: /' "$OUT/libs.txt" || say "note: no libnccl: messages between GPUs are not measured"
for lib in cuda nvrtc cublas; do
    grep -q "^lib$lib: /" "$OUT/libs.txt" || say "warning: lib$lib not found in the usual folders; the backend's probe will say whether the loader finds it"
done

# ---- 3. Binaries ----------------------------------------------------------------------------
BIN="${METP_SIM_BIN:-}"
TESTBIN="${METP_SIM_TEST_BIN:-}"
if [ -n "$ONLY" ] && [ -z "$BIN" ]; then
    command -v cargo >/dev/null 2>&1 || die "no cargo, and METP_SIM_BIN not given"
    step build 240 cargo build --release --features cuda || die "build failed (see build.log)"
    BIN=target/release/metp-sim
elif [ -z "$ONLY" ] && { [ -z "$BIN" ] || [ -z "$TESTBIN" ]; }; then
    command -v cargo >/dev/null 2>&1 || die "no cargo, and METP_SIM_BIN / METP_SIM_TEST_BIN not both given"
    step build 240 cargo build --release --features cuda || die "build failed (see build.log)"
    BIN=target/release/metp-sim
    step build-tests 120 cargo test --release --features cuda --test it --no-run || die "test build failed"
    TESTBIN=$(ls -t target/release/deps/it-* 2>/dev/null | grep -v '\.d$' | head -n 1)
fi
[ -x "$BIN" ] || die "$BIN is not an executable"
"$BIN" --version >>"$SUMMARY" 2>&1
# Virtual devices of the units: the GPUs (--gpus N, else all) when there are 2, 4 or 8 (NCCL),
# else 4 on GPU 0.
USE=$NGPU
((WANT > 1)) && USE=$WANT
case "$USE" in 2 | 4 | 8) DEVICES=$USE ;; *) DEVICES=4 ;; esac

# packs every output into gpu-check.tgz (GPU_CHECK_PACK=1: a harness that brings back only a
# few files gets everything there, beside summary.txt and table.txt)
pack() {
    if [ "${GPU_CHECK_PACK:-0}" = 1 ]; then
        (cd "$OUT" && tar czf "$LIBTMP/gpu-check.tgz" --exclude=gpu-check.tgz . &&
            find . -maxdepth 1 -type f ! -name summary.txt ! -name table.txt -delete &&
            mv "$LIBTMP/gpu-check.tgz" gpu-check.tgz) || echo "gpu-check: packing failed" >&2
    fi
}

# the closing table over the given `gpu-check table` arguments, the summary, the archive; exits
finish() {
    if ! "$BIN" gpu-check table "$@" >"$OUT/table.txt" 2>&1; then
        echo "(gpu-check table failed: $(tail -n 1 "$OUT/table.txt"))" >>"$OUT/table.txt"
        FAILED=1
    fi
    say "done in $((SECONDS - START))s; results in $OUT"
    {
        echo
        cat "$OUT/table.txt"
    } | tee -a "$SUMMARY"
    pack
    exit "$FAILED"
}

# ---- The torchrun measurement (--gpus N, N >= 2) ---------------------------------------------
# dist LIMIT_S: torchrun + scripts/gpu-dist.py on the first $WANT GPUs, then its fit.
HAVE_TORCH=0
if python3 -c 'import torch, torch.distributed.run' >/dev/null 2>&1; then HAVE_TORCH=1; fi
dist() {
    local limit=$1
    if ((!HAVE_TORCH)); then
        say "dist: FAILED: python3 cannot import torch (torch.distributed): nothing measured between GPUs with torchrun"
        FAILED=1
        return 1
    fi
    # What starting $WANT processes, importing torch and NCCL's setup take comes off the budget.
    local budget=$((limit - 30))
    if ((budget < 20)); then
        say "dist: skipped (only ${limit}s left for it)"
        FAILED=1
        return 1
    fi
    step dist "$limit" env OMP_NUM_THREADS=1 LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" \
        python3 -m torch.distributed.run --standalone \
        --nproc_per_node "$WANT" scripts/gpu-dist.py --out "$OUT" --budget-s "$budget" \
        --raw "$OUT/dist-raw.json"
    [ -s "$OUT/dist-summary.txt" ] && cat "$OUT/dist-summary.txt" >>"$SUMMARY"
    if [ -s "$OUT/dist-measurements.json" ]; then
        SAVED_FAILED=$FAILED
        optional fit-dist 25 "$BIN" calibrate --fit "$OUT/dist-measurements.json" --base hgx-h200 \
            --out "$OUT/profile-dist.json" --force
    else
        say "fit-dist: skipped (no dist-measurements.json)"
    fi
    # The same collectives as nccl-tests logs: the link figures --fit-links fits from them.
    local logs=()
    for op in sendrecv all_gather reduce_scatter; do
        [ -s "$OUT/nccl-tests-$op.log" ] && logs+=("$OUT/nccl-tests-$op.log")
    done
    if ((${#logs[@]})); then
        SAVED_FAILED=$FAILED
        optional fit-links 20 "$BIN" calibrate --fit-links "${logs[@]}" --base hgx-h200 \
            --out "$OUT/profile-dist-links.json" --force
    fi
}

# ---- GPU_CHECK_ONLY=dist: the torchrun measurement and its fit, nothing else ------------------
if [ "$ONLY" = dist ]; then
    DL=$(($(left) - 40))
    ((DL > 150)) && DL=150
    dist "$DL"
    say "done in $((SECONDS - START))s; results in $OUT"
    pack
    exit "$FAILED"
fi

# ---- GPU_CHECK_ONLY=units: the units with a committed profile, the table, nothing else --------
if [ "$ONLY" = units ]; then
    UPROFILE="${GPU_CHECK_PROFILE:-reports/gpu/nvidia-h200-2026-11-30/profile-units.json}"
    [ -s "$UPROFILE" ] || die "GPU_CHECK_PROFILE: $UPROFILE is not a file"
    cp "$UPROFILE" "$OUT/profile-units.json"
    say "units only, $DEVICES devices, predicted with $UPROFILE"
    # unit NAME METHOD UNIT SEQ HIDDEN HEADS FFN [KV_HEADS]
    unit() {
        step "run-$1" 45 sh -c "\"$BIN\" run --backend cuda --unit $3 --method $2 --p $DEVICES \
            --seq $4 --hidden $5 --heads $6 --ffn $7 ${8:+--kv-heads $8} --runs 2 \
            --hw \"$UPROFILE\" --format json >\"$OUT/run-$1.json\""
    }
    for spec in "metp attention" "metp mlp" "tp attention" "tp mlp"; do
        set -- $spec
        unit "$1-$2-7b" "$1" "$2" $((2048 * DEVICES)) 4096 32 11008
    done
    for spec in "metp attention" "metp mlp"; do
        set -- $spec
        unit "$1-$2-13b" "$1" "$2" $((1024 * DEVICES)) 5120 40 13824
    done
    # Grouped-query attention: LLaMA-3 8B's attention (32 query heads on 8 K/V heads).
    for method in metp tp; do
        unit "$method-attention-gqa-8b" "$method" attention $((2048 * DEVICES)) 4096 32 14336 8
    done
    UNITS=()
    for f in "$OUT"/run-*.json; do [ -s "$f" ] && UNITS+=(--units "$f"); done
    finish "${UNITS[@]}"
fi

[ -x "$TESTBIN" ] || die "$TESTBIN is not an executable"
PROBE=$("$TESTBIN" gpu_kernels_time --list 2>&1 | head -n 1)
say "test binary: $TESTBIN ($PROBE)"

# ---- 4. GPU tests ---------------------------------------------------------------------------
# Each test in its own process (a sticky CUDA error in one cannot fail the others), at most 90 s
# together (60 s with --gpus N, N >= 2: the torchrun measurement needs its time too).
TESTS_S=90
((WANT > 1)) && TESTS_S=60
TESTS_END=$((SECONDS + TESTS_S))
TESTS=$("$TESTBIN" gpu_ --list 2>/dev/null | sed -n 's/^\(gpu::gpu_[a-z0-9_]*\): test$/\1/p')
[ -n "$TESTS" ] || say "gpu-tests: FAILED: the test binary lists no gpu_ test"
for t in $TESTS; do
    lim=$((TESTS_END - SECONDS))
    ((lim > 45)) && lim=45
    if ((lim < 5)); then
        say "${t#gpu::}: skipped (the tests' ${TESTS_S} s are spent)"
        FAILED=1
        continue
    fi
    step "test-${t#gpu::}" "$lim" "$TESTBIN" "$t" --exact --nocapture --test-threads=1
done
cat "$OUT"/test-gpu_*.log >"$OUT/gpu-tests.log" 2>/dev/null || true
grep -hE "^(test |cuda:|skipped|bf16|attention|256 MiB|host|NCCL|.*error [0-9]| +[0-9]+ +[0-9]+ )" \
    "$OUT"/test-gpu_*.log 2>/dev/null | head -n 120 >"$OUT/gpu-tests-summary.txt" || true
grep -q "skipped: no usable GPU" "$OUT/gpu-tests.log" &&
    say "gpu-tests: WARNING: tests skipped: the backend found no usable GPU (see gpu-tests.log)"

# ---- 5a. PyTorch's kernels (first: the kernel model's held-out shapes) ----------------------
# With --gpus N (N >= 2): torchrun over N GPUs, rank 0 measuring the same kernels.
if ((WANT > 1)); then
    PT=$(($(left) / 3))
    ((PT > 80)) && PT=80
    dist "$PT"
elif ((HAVE_TORCH)) && [ -f scripts/gpu-kernels.py ]; then
    PT=$(($(left) / 4))
    ((PT > 60)) && PT=60
    if ((PT >= 20)); then
        step pytorch-kernels $((PT + 10)) python3 scripts/gpu-kernels.py --out "$OUT/pytorch-kernels.json" --budget-s "$PT"
    else
        say "pytorch-kernels: skipped (time)"
    fi
elif [ ! -f scripts/gpu-kernels.py ]; then
    say "pytorch-kernels: skipped (scripts/gpu-kernels.py is not in this tree)"
else
    say "pytorch-kernels: skipped (python3 cannot import torch)"
fi

# ---- 5. Calibrate ---------------------------------------------------------------------------
# What must remain after calibrating: refit and comparison, the table, PyTorch's kernels.
RESERVE=$((25 + 70))
BUDGET=$(($(left) - RESERVE - 25))
((BUDGET > 150)) && BUDGET=150
PROFILE="$OUT/profile-cuda.json"
MEAS="$OUT/profile-cuda.measurements.json"
if ((BUDGET < 30)); then
    say "calibrate: skipped (only ${BUDGET}s of budget left)"
    FAILED=1
else
    step calibrate $((BUDGET + 25)) sh -c "\"$BIN\" calibrate --backend cuda --devices $DEVICES --runs 2 --force \
        --budget-s $BUDGET --out \"$PROFILE\" --format json >\"$OUT/calibrate.json\""
fi
# The measurement file: beside the profile, or any written by this run (not torchrun's).
if [ ! -s "$MEAS" ]; then
    MEAS=$(find "$OUT" -maxdepth 1 -name '*measurement*.json' ! -name 'dist-*' -newer "$OUT/libs.txt" 2>/dev/null | head -n 1)
fi

# ---- 6. Held-out split, refit, comparison --------------------------------------------------
FITTED="$OUT/profile-fitted.json"
if [ -n "$MEAS" ] && [ -s "$MEAS" ]; then
    say "measurements: $MEAS"
    step split 15 "$BIN" gpu-check split --input "$MEAS" --every 4 \
        --fit "$OUT/measurements-fit.json" --held-out "$OUT/measurements-held-out.json"
    SAVED_FAILED=$FAILED
    # From hgx-h200's kernel model, as `calibrate --backend cuda` starts, not from the profile
    # fitted on every measurement: nothing held out may reach the refit.
    optional fit 20 "$BIN" calibrate --fit "$OUT/measurements-fit.json" --base hgx-h200 \
        --out "$FITTED" --force
    SAVED_FAILED=$FAILED
    if [ -s "$FITTED" ]; then
        optional compare 20 sh -c "\"$BIN\" kernels --hw \"$FITTED\" --input \"$OUT/measurements-held-out.json\" \
            --compare --format json >\"$OUT/kernels-compare.json\""
    else
        say "compare: skipped (no refitted profile)"
    fi
else
    say "split, fit, compare: skipped (no measurement file)"
fi

# ---- 7. Units with the refitted profile, if time is left ------------------------------------
if [ -s "$FITTED" ] && (($(left) > 60)); then
    for spec in "metp attention" "metp mlp" "tp attention" "tp mlp"; do
        set -- $spec
        (($(left) < 25)) && { say "run-$1-$2: skipped (time)"; continue; }
        step "run-$1-$2" 30 sh -c "\"$BIN\" run --backend cuda --unit $2 --method $1 --p $DEVICES \
            --seq $((2048 * DEVICES)) --hidden 4096 --heads 32 --ffn 11008 --runs 2 --hw \"$FITTED\" \
            --format json >\"$OUT/run-$1-$2.json\""
    done
    # Grouped-query attention (LLaMA-3 8B: 32 query heads on 8 K/V heads).
    if (($(left) >= 25)); then
        step "run-metp-attention-gqa" 30 sh -c "\"$BIN\" run --backend cuda --unit attention \
            --method metp --p $DEVICES --seq $((2048 * DEVICES)) --hidden 4096 --heads 32 \
            --kv-heads 8 --ffn 14336 --runs 2 --hw \"$FITTED\" --format json \
            >\"$OUT/run-metp-attention-gqa.json\""
    else
        say "run-metp-attention-gqa: skipped (time)"
    fi
fi

# ---- 9. The table ---------------------------------------------------------------------------
UNITS=()
for f in "$OUT/calibrate.json" "$OUT"/run-*.json; do [ -s "$f" ] && UNITS+=(--units "$f"); done
# ---- 10. The summary and one archive (GPU_CHECK_PACK=1) --------------------------------------
finish --compare "$OUT/kernels-compare.json" "${UNITS[@]}"
