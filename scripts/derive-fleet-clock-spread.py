#!/usr/bin/env python3
"""Fits `kernels.gemm.fleet_clock_spread` — how much the clock a GPU holds in a training step
varies from GPU to GPU of a fleet — to the published runs that differ only in data-parallel
replicas, and writes it into the profiles those runs name (dgx-h100 and gb200-nvl72; their
derived profiles take it from them: run scripts/derive-grand-teton.py and
derive-gb200-segments.py afterwards, as scripts/regen-reports.sh does).

Why: a synchronous job advances at its slowest GPU's pace, and the slowest of N GPUs whose
clocks spread with relative standard deviation σ sits at 1 − σ·E[max of N standard normals]
of the typical clock (src/config/fleet.rs). In a weak-scaling group every GPU does the same
work at every size, so the step grows from the fewest GPUs to the most by what scaling out
costs; the tool without a spread prices that growth from the network alone. What it leaves
out, over the GEMMs' share f of the step (the kernels that hold the power limit, as the step
clock says: kernels.gemm.step_clock_fraction) and the growth of E[max] between the two sizes,
is one estimate of σ:

    σ ≈ (measured growth − predicted growth) / (f · (E[max of N₂] − E[max of N₁]))

The profile takes the median over the groups on that GPU, leaving out only a group with a run
whose gap no one part of its step explains within 25% (the report's own verdict that a cost the
model leaves out is more likely there: runs::suspects; MosaicML's FSDP runs of 1B to 7B). The
absolute step of any run is not used: it is the check (README, "The clock of the slowest GPU").

The predictions are the tool's own, with the spread removed from every profile first (a copy of
runs/ pointing at copies of the profiles, in a temporary folder), so the fit does not depend on
the value it replaces. Needs the release binary (or METP_SIM=path):

    cargo build --release && python3 scripts/derive-fleet-clock-spread.py
"""
import json
import math
import os
import pathlib
import statistics
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = os.environ.get("METP_SIM", str(ROOT / "target/release/metp-sim"))

# The profile the fit is written to, for the runs' profiles (derived ones take their base's).
BASE = {
    "dgx-h100": "dgx-h100",
    "grand-teton-h100-roce": "dgx-h100",
    "gb200-nvl72": "gb200-nvl72",
    "gb200-nvl72-seg64": "gb200-nvl72",
}

SOURCE = (
    "fitted by scripts/derive-fleet-clock-spread.py to the {n} groups of published runs on this GPU "
    "that differ only in data-parallel replicas (reports/runs/runs.md, 'Runs that differ only in "
    "data-parallel replicas': {groups}; {skipped} left out, with a run whose gap the report says no "
    "one part of its step explains within 25%): in each, the step's growth from the fewest to the most GPUs "
    "that the tool without a spread leaves out, over the GEMMs' share of the step and the growth of E[max of N standard normals] between the two sizes, estimates the "
    "spread; the median of the {n} estimates ({lo:.2%} to {hi:.2%}, quartiles {q1:.2%} and {q3:.2%}). "
    "Mechanism: GPUs of one model and power limit hold different clocks under load (silicon and "
    "power management: Sinha et al., SC'22, 'Not All GPUs Are Created Equal', ~8% performance "
    "variation within a cluster), and a synchronous job waits for its slowest GPU every step, whose "
    "clock is 1 - spread x E[max of N normals] of the typical one (src/config/fleet.rs); it applies to "
    "GEMMs, the kernels that hold the power limit, as the step clock does. Fitted to "
    "how the step grows with the GPUs, not to any run's step: the runs' absolute steps are the check."
)


def expected_max(n: int) -> float:
    """E[max of n standard normals], as src/config/fleet.rs computes it (Simpson on [-12, 0] and
    [0, 12])."""
    if n <= 1:
        return 0.0

    def ln_cdf(x):
        upper = 0.5 * math.erfc(x / math.sqrt(2.0))
        return -math.inf if upper >= 1.0 else math.log1p(-upper)

    def below(x):  # −Φⁿ, integrated over [−12, 0]
        return -math.exp(n * ln_cdf(x))

    def above(x):  # 1 − Φⁿ, integrated over [0, 12]
        return -math.expm1(n * ln_cdf(x))

    steps = 12 * 32
    h = 12.0 / steps
    total = 0.0
    for f, lo in ((below, -12.0), (above, 0.0)):
        s = f(lo) + f(lo + 12.0)
        for i in range(1, steps):
            s += (4 if i % 2 else 2) * f(lo + i * h)
        total += s * h / 3.0
    return total


def without_spread(tmp: pathlib.Path) -> pathlib.Path:
    """Copies of every profile without a spread and of runs/ pointing at them; the runs folder."""
    hw = tmp / "hw"
    hw.mkdir()
    for p in sorted((ROOT / "hardware-profiles").glob("*.json")):
        d = json.loads(p.read_text())
        d.get("kernels", {}).get("gemm", {}).pop("fleet_clock_spread", None)
        (hw / p.name).write_text(json.dumps(d, indent=2, ensure_ascii=False) + "\n")
    runs = tmp / "runs"
    runs.mkdir()
    for p in sorted((ROOT / "runs").glob("*.json")):
        d = json.loads(p.read_text())
        name = d["hardware"]
        if "/" not in name and not name.endswith(".json"):
            d["hardware"] = str(hw / f"{name}.json")
        if "/" in d["model"] or d["model"].endswith(".json"):
            d["model"] = str((ROOT / "runs" / d["model"]).resolve())
        (runs / p.name).write_text(json.dumps(d, indent=2, ensure_ascii=False) + "\n")
    return runs


def fit() -> dict:
    with tempfile.TemporaryDirectory() as t:
        tmp = pathlib.Path(t)
        runs = without_spread(tmp)
        out = tmp / "out"
        subprocess.run(
            [BIN, "validate", "--runs", str(runs), "--out", str(out)],
            cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
        )
        report = json.loads((out / "runs.json").read_text())
    by_id = {r["id"]: r for r in report["runs"]}
    estimates: dict[str, list[tuple[float, str]]] = {}
    skipped: dict[str, int] = {}
    for g in report["weak_scaling"]:
        base = BASE.get(g["hardware"])
        if base is None:
            continue
        skipped.setdefault(base, 0)
        # Where no one part of a run's step explains its gap within 25%, the report itself says
        # a cost the model leaves out is more likely (runs::suspects): that group's growth is
        # not read as the clocks'.
        if any(not by_id[p["id"]]["suspects"] for p in g["points"]):
            skipped[base] += 1
            continue
        a, b = g["points"][0], g["points"][-1]
        largest = by_id[b["id"]]
        parts = largest["breakdown"]
        clock_bound = parts["gemm_s"] / largest["predicted_step_s"]
        measured = b["measured_step_s"] / a["measured_step_s"] - 1.0
        predicted = b["predicted_step_s"] / a["predicted_step_s"] - 1.0
        spread = (measured - predicted) / (
            clock_bound * (expected_max(b["gpus"]) - expected_max(a["gpus"]))
        )
        label = f"{g['model']} {a['gpus']}-{b['gpus']} GPUs {spread:+.2%}"
        estimates.setdefault(base, []).append((spread, label))
    return estimates, skipped


def main() -> None:
    estimates, skipped = fit()
    for base, est in sorted(estimates.items()):
        values = sorted(v for v, _ in est)
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
        value = round(statistics.median(values), 5)
        if not 0.0 <= value <= 0.1:
            raise SystemExit(f"{base}: fitted spread {value} is outside [0, 0.1]")
        path = ROOT / f"hardware-profiles/{base}.json"
        d = json.loads(path.read_text())
        gemm = d["kernels"]["gemm"]
        figure = {
            "value": value,
            "source": SOURCE.format(
                n=len(values), skipped=skipped[base], groups="; ".join(l for _, l in sorted(est, key=lambda e: e[1])),
                lo=values[0], hi=values[-1], q1=q1, q3=q3,
            ),
        }
        # After step_clock_fraction, where the profile's other clock figure is.
        rebuilt = {}
        for k, v in gemm.items():
            if k != "fleet_clock_spread":
                rebuilt[k] = v
            if k == "step_clock_fraction":
                rebuilt["fleet_clock_spread"] = figure
        if "fleet_clock_spread" not in rebuilt:
            rebuilt["fleet_clock_spread"] = figure
        d["kernels"]["gemm"] = rebuilt
        path.write_text(json.dumps(d, indent=2, ensure_ascii=False) + "\n")
        print(f"wrote {path.relative_to(ROOT)}: fleet_clock_spread {value} from {len(values)} groups")


if __name__ == "__main__":
    main()
