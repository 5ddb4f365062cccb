#!/usr/bin/env bash
# GPU check of metp-sim's CUDA backend, in one go, in under 10 minutes:
#   1. fails at once, with the reason, when this machine has no usable NVIDIA GPU;
#   2. finds the CUDA 12 libraries cudarc loads by name (libcuda, libnvrtc, libcublas,
#      libcublasLt, libnccl — NCCL is looked up as libnccl.so only, so a libnccl.so link to
#      libnccl.so.2 is made in a temporary folder put first on LD_LIBRARY_PATH);
#   3. builds with --features cuda (release) — or uses prebuilt binaries given as
#      METP_SIM_BIN (the metp-sim binary) and METP_SIM_TEST_BIN (the tests/it binary), for a
#      machine without cargo or without network;
#   4. runs the GPU tests (tests/it/gpu.rs);
#   5. runs `metp-sim calibrate --backend cuda` (profile + predicted vs measured units);
#   6. runs `metp-sim run --backend cuda` for METP and TP, attention and MLP, with the profile;
# and writes everything into one folder: $OUT if set, else reports/gpu-check/<date>.
#
# Exit status: 0 when every step passed, 1 otherwise (summary.txt says which).
set -uo pipefail
cd "$(dirname "$0")/.."

OUT="${OUT:-reports/gpu-check/$(date -u +%Y-%m-%d)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
START=$SECONDS
BUDGET=570 # seconds for the whole script

say() { echo "gpu-check: $*" | tee -a "$SUMMARY"; }
die() {
    echo "gpu-check: FAILED: $*" | tee -a "$SUMMARY" >&2
    exit 1
}
left() { echo $((BUDGET - (SECONDS - START))); }
# step NAME LIMIT_S CMD... : runs CMD with a time limit (never past the budget), logs to
# $OUT/NAME.log, records pass/fail.
FAILED=0
step() {
    local name=$1 limit=$2
    shift 2
    local l
    l=$(left)
    if ((l < 10)); then
        say "$name: skipped (time budget spent)"
        FAILED=1
        return 1
    fi
    ((limit > l)) && limit=$l
    say "$name: running (limit ${limit}s)"
    if timeout "$limit" "$@" >"$OUT/$name.log" 2>&1; then
        say "$name: ok ($((SECONDS - START))s elapsed)"
    else
        local rc=$?
        say "$name: FAILED (exit $rc; see $name.log: $(tail -n 1 "$OUT/$name.log"))"
        FAILED=1
        return 1
    fi
}

# ---- 1. A GPU, or stop here -------------------------------------------------------------
command -v nvidia-smi >/dev/null 2>&1 ||
    die "no nvidia-smi: this machine has no NVIDIA driver, so no GPU to check"
nvidia-smi -L >"$OUT/nvidia-smi-L.txt" 2>&1 ||
    die "nvidia-smi -L failed: no usable GPU ($(head -n 1 "$OUT/nvidia-smi-L.txt"))"
grep -q '^GPU 0' "$OUT/nvidia-smi-L.txt" || die "nvidia-smi lists no GPU"
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || true
NGPU=$(grep -c '^GPU ' "$OUT/nvidia-smi-L.txt")
say "found $NGPU GPU(s): $(head -n 1 "$OUT/nvidia-smi-L.txt")"

# ---- 2. Libraries ---------------------------------------------------------------------------
LIBTMP=$(mktemp -d)
trap 'rm -rf "$LIBTMP"' EXIT
DIRS=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-12*/lib64 \
    /usr/lib/x86_64-linux-gnu /usr/lib64; do
    [ -d "$d" ] && DIRS="$DIRS $d"
done
# Libraries shipped in Python wheels (nvidia-cublas-cu12, nvidia-nccl-cu12, ...).
for sp in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    for d in "$sp"/nvidia/*/lib; do [ -d "$d" ] && DIRS="$DIRS $d"; done
done
: >"$OUT/libs.txt"
for lib in cuda nvrtc cublas cublasLt nccl; do
    f=""
    for d in $DIRS; do
        f=$(ls "$d"/lib$lib.so "$d"/lib$lib.so.1 "$d"/lib$lib.so.12 "$d"/lib$lib.so.2 2>/dev/null | head -n 1)
        [ -n "$f" ] && break
    done
    if [ -n "$f" ]; then
        echo "lib$lib: $f" >>"$OUT/libs.txt"
        # cudarc finds most libraries by their versioned names too, but NCCL only as libnccl.so.
        [ -e "$(dirname "$f")/lib$lib.so" ] || ln -sf "$f" "$LIBTMP/lib$lib.so"
    else
        echo "lib$lib: not found" >>"$OUT/libs.txt"
    fi
done
export LD_LIBRARY_PATH="$LIBTMP:$(echo $DIRS | tr ' ' ':')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
say "libraries: $(tr '\n' ';' <"$OUT/libs.txt")"
grep -q '^libcuda: /' "$OUT/libs.txt" || say "warning: libcuda not found in the usual folders; relying on the loader"

# ---- 3. Build -------------------------------------------------------------------------------
BIN="${METP_SIM_BIN:-}"
TESTBIN="${METP_SIM_TEST_BIN:-}"
if [ -z "$BIN" ]; then
    command -v cargo >/dev/null 2>&1 || die "no cargo and no METP_SIM_BIN: cannot build"
    step build 300 cargo build --release --features cuda || die "build failed (see build.log)"
    BIN=target/release/metp-sim
fi
[ -x "$BIN" ] || die "$BIN is not an executable"
"$BIN" --version >>"$SUMMARY" 2>&1

# ---- 4. GPU tests ---------------------------------------------------------------------------
if [ -n "$TESTBIN" ]; then
    step gpu-tests 120 "$TESTBIN" gpu_ --nocapture --test-threads=1
else
    step gpu-tests 200 cargo test --release --features cuda --test it -- gpu_ --nocapture --test-threads=1
fi

# ---- 5. Calibrate ---------------------------------------------------------------------------
DEVICES=2
step calibrate 240 "$BIN" calibrate --backend cuda --devices "$DEVICES" --runs 2 --force \
    --out "$OUT/calibrated-cuda.json" --format json
[ -s "$OUT/calibrate.log" ] && cp "$OUT/calibrate.log" "$OUT/calibrate.json"

# ---- 6. Units on the GPU, METP and TP -------------------------------------------------------
HW=()
[ -s "$OUT/calibrated-cuda.json" ] && HW=(--hw "$OUT/calibrated-cuda.json")
for unit in attention mlp; do
    for method in metp tp; do
        step "run-$method-$unit" 60 "$BIN" run --backend cuda --unit "$unit" --method "$method" \
            --p 2 --seq 2048 --hidden 256 --heads 4 --ffn 1024 --runs 3 "${HW[@]}" --format json
    done
done

# ---- Summary --------------------------------------------------------------------------------
for f in "$OUT"/run-*.log "$OUT"/calibrate.json; do
    [ -s "$f" ] || continue
    echo "== $(basename "$f")" >>"$SUMMARY"
    grep -E '"(max_rel_error|measured_time_s|predicted_time_s|time_rel_error|rel_error|measured_peak_bytes)"' "$f" |
        head -n 24 >>"$SUMMARY" || true
done
say "done in $((SECONDS - START))s; results in $OUT"
exit "$FAILED"
