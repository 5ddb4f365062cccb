#!/usr/bin/env bash
# Issues 10 and 22: hostile commands, each under `prlimit --as=2GiB` (the issue's "done when"), with a
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

# ---- Issue 22 (hostile pass 2): files from elsewhere, physical measurements, bounded work ----
# (Class 4's `plan` cases and class 5's `--global-batch` are the planner's, not listed here.)
echo "== issue 22"
python3 - "$TMP" <<'PY'
import json, sys, random
d = sys.argv[1]
def put(name, v):
    json.dump(v, open(f"{d}/{name}", "w"))
m = json.load(open("hardware-profiles/measurements/h200-pytorch-2026-11-30.json"))
def tamper(name, f):
    x = json.loads(json.dumps(m)); f(x); put(name, x)
tamper("m-tiny.json", lambda x: x["gemm"][0].update(s=5e-324))
tamper("m-huge.json", lambda x: x["gemm"][0].update(s=1e300))
tamper("m-gemm40.json", lambda x: x["gemm"][0].update(m=2**40))
tamper("m-att40.json", lambda x: x["attention"][0].update(s=2**40))
tamper("m-copy.json", lambda x: x["copy"][0].update(bytes=2**40, copy_s=2e-9))
tamper("m-eager.json", lambda x: x.update(eager_op_s=5e-324))
tamper("m-p2p.json", lambda x: x.update(p2p=[{"from": 1, "to": 1, "bytes": 1 << 20, "s": 1e-4}]))
tamper("m-ranks.json", lambda x: x.update(collectives=[{"op": "all-reduce", "ranks": 2**32 - 1, "bytes": 1 << 20, "s": 1e-3}]))
def spread(x):
    g = dict(x["gemm"][0]); g["s"] = 100.0; x["gemm"][0]["s"] = 1e-6; x["gemm"].append(g)
tamper("m-spread.json", spread)
tamper("m-fast.json", lambda x: [g.update(s=g["s"] / 1e3) for g in x["gemm"]])
tamper("m-kv.json", lambda x: x["attention"][0].update(kv_heads=32))
tamper("m-kvdiv.json", lambda x: x["attention"][0].update(kv_heads=3))
put("compare-neg.json", {"kernels": [], "by_kind": [{"kind": "gemm", "samples": 4, "median_abs_error": -0.3, "max_abs_error": 0.1}]})
put("compare-empty.json", {"kernels": [], "by_kind": [{"kind": "gemm", "samples": 0, "median_abs_error": 0.0, "max_abs_error": 0.0}]})
# 90,000 attention calls (a 6-MB file, under the 8 MiB input bound), varied shapes.
random.seed(1)
att, seen = [], set()
while len(att) < 90000:
    b = random.choice([1, 2, 4, 8, 16]); h = random.choice([8, 16, 32, 64]); s = random.randint(64, 32768)
    c = random.random() < 0.5
    if (b, h, s, c) in seen: continue
    seen.add((b, h, s, c))
    pairs = s * s / (2 if c else 1)
    att.append({"b": b, "heads": h, "s": s, "causal": c, "fwd_s": float("%.3g" % (4 * b * h * pairs * 128 / 4e14 + 8e-6))})
open(f"{d}/att90k.json", "w").write(json.dumps({"what": "synthetic", "date": "2026-12-01", "device": "NVIDIA H200", "software": "synthetic", "attention": att}, separators=(",", ":")))
hw = json.load(open("hardware-profiles/mi300x-8.json"))
hw["intra_node"]["link_bytes_per_s_per_direction"]["value"] = 4e11; put("mesh.json", hw)
hw = json.load(open("hardware-profiles/dgx-a100-80gb.json")); hw["name"] = "N" * 256; put("long.json", hw)
PY
ls -l "$TMP/att90k.json" | awk '{print "      att90k.json: " $5 " bytes"}'
# Class 1: merge trusts shards. Two parts of a small sweep, then one tampered copy per case.
"$BIN" sweep --model gpt3-1.3b --methods metp --p 2 --seq 4k,8k --engine analytic --svg-only \
    --out "$TMP/parts" --shard 0/2 >/dev/null
"$BIN" sweep --model gpt3-1.3b --methods metp --p 2 --seq 4k,8k --engine analytic --svg-only \
    --out "$TMP/parts" --shard 1/2 >/dev/null
python3 - "$TMP" <<'PY'
import json, os, sys, shutil
d = sys.argv[1]
p0 = json.load(open(f"{d}/parts/sweep.shard-0-of-2.json"))
p1 = json.load(open(f"{d}/parts/sweep.shard-1-of-2.json"))
def case(name, which, f):
    os.makedirs(f"{d}/t-{name}")
    a, b = json.loads(json.dumps(p0)), json.loads(json.dumps(p1))
    f(a if which == 0 else b)
    json.dump(a, open(f"{d}/t-{name}/sweep.shard-0-of-2.json", "w"))
    json.dump(b, open(f"{d}/t-{name}/sweep.shard-1-of-2.json", "w"))
pt = lambda v: v["data"]["result"]["points"][0]
case("negative", 1, lambda v: pt(v).update(step_time_s=-1.0))
case("mfu5", 1, lambda v: pt(v).update(mfu=5.0))
case("e308", 1, lambda v: pt(v).update(step_time_s=1e308))
case("fits10x", 1, lambda v: pt(v).update(peak_bytes=pt(v)["capacity_bytes"] * 10))
case("part7of3", 1, lambda v: v.update(shard={"index": 7, "count": 3}))
case("version", 1, lambda v: v.update(version="9.9.9"))
case("maxseq", 0, lambda v: v["data"]["result"].update(maxseq=[]))
case("layers0", 0, lambda v: v["data"]["spec"]["models"][0].update(layers=0, hidden=0))
case("memory0", 0, lambda v: (v["data"]["spec"]["hardware"][0]["gpu"]["memory_bytes"].update(value=0.0), v["data"]["spec"]["hardware"][0]["gpu"]["peak_bf16_flops_per_s"].update(value=-1.0)))
case("nul", 0, lambda v: v["data"]["spec"]["models"][0].update(name="a\u0000<b"))
case("outpath", 0, lambda v: [x["data"].update(out=f"{d}/elsewhere") for x in (v,)])
PY
for c in negative mfu5 e308 fits10x part7of3 version maxseq layers0 memory0 nul; do
    run merge "$TMP/t-$c" --out "$TMP/t-$c-out"
    [ -e "$TMP/t-$c-out" ] && echo "      !! wrote $TMP/t-$c-out"
done
run merge "$TMP/t-outpath"
[ -e "$TMP/elsewhere" ] && echo "      !! wrote where the shard said"
# Class 2: measurements no GPU can produce.
for f in tiny huge gemm40 att40 copy eager p2p ranks spread kv kvdiv; do
    run kernels --input "$TMP/m-$f.json" --compare
done
run calibrate --fit "$TMP/m-fast.json" --base hgx-h200 --out "$TMP/fast-fitted.json"
run gpu-check table --compare "$TMP/compare-neg.json"
run gpu-check table --compare "$TMP/compare-empty.json"
# Class 3: outputs over inputs.
cp hardware-profiles/measurements/h200-pytorch-2026-11-30.json "$TMP/in.json"
run gpu-check split --input "$TMP/in.json" --fit "$TMP/same.json" --held-out "$TMP/same.json"
run gpu-check split --input "$TMP/in.json" --fit "$TMP/in.json" --held-out "$TMP/h.json"
run gpu-check merge "$TMP/in.json" --out "$TMP/in.json"
cmp -s "$TMP/in.json" hardware-profiles/measurements/h200-pytorch-2026-11-30.json \
    || echo "      !! the input changed"
# Class 4: work at the limits.
run calibrate --fit "$TMP/att90k.json" --base hgx-h200 --out "$TMP/att90k-fitted.json"
run sweep --engine analytic --seq 1k..4166k:+1k --svg-only --out "$TMP/s99984"
# Class 5: flags offered and then impossible.
run overlap --pp 2
run overlap --cp 2
# Class 6: the rest.
mkdir -p "$TMP/big" && truncate -s 300M "$TMP/big/sweep.shard-0-of-1.json"
run merge "$TMP/big"
run plan --gpus 8 --seq 2000000000000
run memory --hw "$TMP/mesh.json"
mkdir -p "$TMP/cwd"
ROOT=$(pwd); ABSBIN=$(realpath "$BIN")
(cd "$TMP/cwd" && METP_SIM_DATA="$ROOT" prlimit --as=$((2 << 30)) "$ABSBIN" validate \
    --hw "$TMP/long.json" --svg-only >/dev/null 2>"$TMP/stderr"
 echo "$?     metp-sim validate --hw <a 256-character name> (default folder)"
 echo "      $(ls reports) $(head -1 "$TMP/stderr")")
run sweep --model gpt3-1.3b --methods metp --p 2,4 --seq 4k --engine analytic --svg-only --out "$TMP/reuse"
run sweep --model gpt3-1.3b --methods metp --p 2 --seq 4k --engine analytic --svg-only --out "$TMP/reuse"
ls "$TMP/reuse" | grep -q p4 && echo "      !! an old plot is left" || echo "      reused folder: no p4 plot left"
