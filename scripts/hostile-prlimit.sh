#!/usr/bin/env bash
# Issue 10's hostile commands, each under `prlimit --as=2GiB` (the issue's "done when"), with a
# release binary: prints, per command, the exit status, the wall time, the peak resident memory
# and the first line of stderr. Every one must finish (0) or refuse with 1 or 2 in one line —
# never 134 (abort), 101 (panic) or a kill. The regression tests of the same classes are
# tests/it/hostile/ (run by `cargo test`); this script is the by-hand check of the issue's own
# list at full size, which a debug build would take minutes over.
#
# Usage: scripts/hostile-prlimit.sh [path/to/metp-sim]   (default target/release/metp-sim)
set -u
cd "$(dirname "$0")/.."
BIN=${1:-target/release/metp-sim}
[ -x "$BIN" ] || { echo "no binary at $BIN (cargo build --release)" >&2; exit 2; }
command -v prlimit >/dev/null || { echo "prlimit (util-linux) is not installed" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# Hostile input files, from the bundled ones.
python3 - "$TMP" <<'EOF'
import json, sys
d = sys.argv[1]
hw = json.load(open("hardware-profiles/dgx-a100-80gb.json"))
m = json.load(open("models/llama2-7b.json"))
def put(name, v):
    json.dump(v, open(f"{d}/{name}", "w"))
h = json.loads(json.dumps(hw)); h["inter_node"]["nics_per_node"] = 10**9; put("nics.json", h)
h = json.loads(json.dumps(hw)); h["gpu"]["peak_bf16_flops_per_s"]["value"] = 1e-300; put("tiny.json", h)
h = json.loads(json.dumps(hw)); h["reserved"]["nccl_bytes"]["value"] = 1e308; put("nccl.json", h)
h = json.loads(json.dumps(hw)); h["intra_node"]["collective_latency_s"]["value"] = 5; put("coll.json", h)
x = dict(m); x["layers"] = 2**20; put("layers20.json", x)
x = dict(m); x["layers"] = 2**32; put("layers32.json", x)
x = dict(m); x["name"] = "bad\u0000name"; put("nul.json", x)
open(f"{d}/trailing.json", "w").write(json.dumps(m) + " xyz")
open(f"{d}/afile", "w").write("x")
EOF

run() {
    local t0 t1 rc rss
    t0=$(date +%s.%N)
    /usr/bin/time -q -o "$TMP/time" -f "%M" prlimit --as=$((2 << 30)) "$BIN" "$@" \
        >/dev/null 2>"$TMP/stderr"
    rc=$?
    t1=$(date +%s.%N)
    rss=$(tail -1 "$TMP/time")
    printf '%-4s %6.1fs %7s KB  metp-sim %s\n      %s\n' "$rc" "$(echo "$t1 - $t0" | bc)" \
        "$rss" "$*" "$(head -1 "$TMP/stderr")"
}

# Class 1: aborts on inputs it accepts.
run simulate --hw "$TMP/nics.json" --nodes 2 --p 16
run simulate --model "$TMP/layers20.json"
run simulate --p 8 --dp 1000 --nodes 1000
run simulate --global-batch 65536
run simulate --method ring --p 1024 --nodes 128
# Class 2: impossible numbers.
run simulate --seq 1g
run simulate --hw "$TMP/tiny.json"
run sweep --hw "$TMP/tiny.json" --seq 4k --engine analytic --out "$TMP/s2"
run memory --model "$TMP/layers32.json"
run simulate --scale flops=1e-300
# Class 3: wraparound.
run memory --hw "$TMP/nccl.json"
run simulate --nodes 2305843009213693952
# Class 4: lenient parsing, no size cap.
run memory --model "$TMP/trailing.json"
run memory --model /dev/zero
# Class 5: work checked after it is done.
run sweep --seq 1..1099511627776:+1
run simulate --seq 512k --trace "$TMP/afile/t.json"
run validate --out "$TMP/afile/claims"
run calibrate --backend cpu --quick --out "$TMP/afile/cpu.json"
# Class 6: hangs and uncapped knobs.
run run --backend cpu --link-bandwidth 1
run run --backend cpu --link-bandwidth 1e6 --link-latency 1e9
run calibrate --backend cpu --devices 100000
run calibrate --backend cpu --runs 0
# Class 8: unbounded cost on plausible inputs.
run plan --gpus 1024 --seq 512k
run plan --gpus 1024 --seq 1m
run simulate --method ring --p 256 --nodes 32 --seq 1m
run simulate --method ring --p 64 --nodes 8 --seq 256k --trace "$TMP/ring.json"
ls -l "$TMP/ring.json" 2>/dev/null | awk '{print "      trace: " $5 " bytes"}'
# Class 9: small things.
run memory --model "$TMP/nul.json"
run memory --hw "$TMP/coll.json"
run sweep --model gpt3-1.3b,gpt3-2.7b --seq 4k --p 2 --engine analytic --svg-only --out "$TMP/s9"
