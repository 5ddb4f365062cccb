//! `scripts/gpu-dist.py` (torchrun + torch.distributed on several GPUs) without a GPU: the
//! sizes it measures are the messages METP's and TP-SP's schedules send (checked against
//! `schedule::plan`), and the files it writes from its raw results are a measurement file that
//! `calibrate --fit` reads and fits — the link figures it recovers are the ones the synthetic
//! results were made with —, every GPU's GEMMs as sessions, and nccl-tests-style logs. Needs only python3 (no torch); says
//! "skipped" without it. With torch installed (`METP_SIM_TORCH_PYTHON`, else python3), one
//! more test runs the script itself under `torchrun --nproc_per_node 2` on the CPU (gloo).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use metp_sim::config::{load_model, MethodId, Options};
use metp_sim::fitting::measurements::KernelMeasurements;
use metp_sim::schedule::{CollectiveOp, Stage, StepPlan};

use crate::common::workload;
use crate::skipped;

/// The script's latency-bound sizes (measured whatever the schedules send).
const SMALL: [u64; 2] = [1 << 16, 1 << 20];

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/gpu-dist.py");

/// python3, or None (the caller says skipped).
fn python() -> Option<String> {
    let ok = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then(|| "python3".to_string())
}

fn sizes_of(stages: &[Stage], msgs: &mut BTreeSet<u64>, colls: &mut BTreeSet<u64>) {
    for s in stages {
        match s {
            Stage::Ring(r) => {
                msgs.insert(r.prefetch_bytes);
                if r.accumulator_bytes > 0 {
                    msgs.insert(r.accumulator_bytes);
                }
            }
            Stage::Outer(o) => {
                msgs.insert(o.weight_bytes);
                sizes_of(&o.body, msgs, colls);
            }
            Stage::Collective { op, bytes, .. } => {
                if matches!(op, CollectiveOp::AllGather | CollectiveOp::ReduceScatter) {
                    colls.insert(*bytes);
                }
            }
            Stage::Compute(_) => {}
        }
    }
}

fn layer_sizes(plan: &StepPlan, msgs: &mut BTreeSet<u64>, colls: &mut BTreeSet<u64>) {
    for b in plan.layer_fwd.iter().chain(&plan.layer_bwd) {
        sizes_of(&b.stages, msgs, colls);
    }
}

/// The script's plan at 8 ranks is exactly the schedule's ring messages (METP: K/V, their fp32
/// accumulators, head-group and MLP weight shards) and TP-SP's all-gather / reduce-scatter
/// buffers, for LLaMA-2 7B/13B/70B at 512…32768 tokens per rank, up to 1 GiB, plus the two
/// latency-bound sizes.
#[test]
fn the_dist_plan_is_the_messages_metp_and_tp_sp_send() {
    let Some(py) = python() else {
        skipped("no python3 for scripts/gpu-dist.py --plan");
        return;
    };
    let out = Command::new(&py)
        .args([SCRIPT, "--plan", "8"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sizes = |op: &str| -> BTreeSet<u64> {
        v[op]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r[0].as_u64().unwrap())
            .filter(|b| !SMALL.contains(b))
            .collect()
    };
    let (mut msgs, mut colls) = (BTreeSet::new(), BTreeSet::new());
    for model in ["llama2-7b", "llama2-13b", "llama2-70b"] {
        for c in [512u64, 2048, 8192, 32768] {
            for method in [MethodId::Metp, MethodId::TpSp] {
                let w = workload(
                    load_model(model).unwrap(),
                    method,
                    8,
                    8 * c,
                    Options::default(),
                );
                let plan = metp_sim::schedule::plan(&w.validate().unwrap());
                layer_sizes(&plan, &mut msgs, &mut colls);
            }
        }
    }
    msgs.retain(|b| *b > 0 && *b <= 1 << 30 && !SMALL.contains(b));
    colls.retain(|b| *b <= 1 << 30 && !SMALL.contains(b));
    assert!(!msgs.is_empty() && !colls.is_empty());
    assert_eq!(sizes("sendrecv"), msgs, "ring-step sizes");
    assert_eq!(sizes("all_gather"), colls, "all-gather sizes");
    assert_eq!(sizes("reduce_scatter"), colls, "reduce-scatter sizes");
    // A bad rank count is a usage error, not a traceback.
    let bad = Command::new(&py)
        .args([SCRIPT, "--plan", "1"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

const ALPHA_S: f64 = 12e-6;
const B_PER_S: f64 = 140e9;

/// The script's plan over `ranks` ranks (`--plan`; python3 must be there).
pub(crate) fn plan_of(ranks: u32) -> serde_json::Value {
    let o = Command::new("python3")
        .args([SCRIPT, "--plan", &ranks.to_string()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Raw results of 8 ranks as rank 0 gathers them, with every message and collective timed as
/// the model prices it (α + bytes/B; (n−1)(α + M/(nB))) and every GPU's GEMMs at a rate of its
/// own.
pub(crate) fn synthetic_raw(plan: &serde_json::Value) -> serde_json::Value {
    let n = 8.0;
    let rows = |op: &str, f: &dyn Fn(f64) -> f64| -> Vec<serde_json::Value> {
        plan[op]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let b = r[0].as_f64().unwrap();
                serde_json::json!({"bytes": b as u64, "s": f(b)})
            })
            .collect()
    };
    let step = |b: f64| ALPHA_S + b / B_PER_S;
    let coll = |b: f64| (n - 1.0) * (ALPHA_S + (b / n).ceil() / B_PER_S);
    let kernels: Vec<serde_json::Value> = (0..8)
        .map(|r| {
            let rate = 6.0e14 * (1.0 - 0.01 * r as f64);
            let gemm: Vec<serde_json::Value> = [1024u64, 2048, 4096, 8192]
                .iter()
                .map(|&s| {
                    let f = 2.0 * (s * s * s) as f64;
                    serde_json::json!({"m": s, "n": s, "k": s, "flops": f, "s": f / rate})
                })
                .collect();
            let mut k = serde_json::json!({"gemm": gemm, "eager_op_s": 7e-6, "sm_count": 132});
            if r == 0 {
                k["attention"] = serde_json::json!([{"b": 1, "heads": 4, "s": 2048,
                    "causal": true, "fwd_s": 2e-4, "bwd_s": 5e-4}]);
                k["copy"] = serde_json::json!([{"bytes": 1 << 24, "copy_s": 1.2e-5}]);
            }
            k
        })
        .collect();
    serde_json::json!({
        "ranks": 8, "backend": "nccl", "skipped": 0, "budget_s": 90.0, "date": "2026-12-01",
        "host": "node1", "software": "torch 2.15.0 nccl 2.30.7", "elapsed_s": 61.0,
        "devices": vec!["NVIDIA H200"; 8],
        "sendrecv": rows("sendrecv", &step),
        "all_gather": rows("all_gather", &coll),
        "reduce_scatter": rows("reduce_scatter", &coll),
        "kernels": kernels,
    })
}

/// The script's outputs from synthetic raw results: a measurement file (ring steps with
/// `ranks`, collectives with nccl-tests' bus bandwidth, every GPU's GEMMs as its own session)
/// that `calibrate --fit` fits back to the link the data was made with, and nccl-tests-style
/// logs whose rows add up. A broken raw file is one line and exit 1.
#[test]
fn the_dist_outputs_are_a_measurement_file_calibrate_fits() {
    let Some(py) = python() else {
        skipped("no python3 for scripts/gpu-dist.py --format");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let plan = plan_of(8);
    let raw = dir.path().join("raw.json");
    std::fs::write(&raw, synthetic_raw(&plan).to_string()).unwrap();
    let out = dir.path().join("out");
    let o = Command::new(&py)
        .arg(SCRIPT)
        .arg("--format")
        .arg(&raw)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary = String::from_utf8_lossy(&o.stdout);
    // GPU r's GEMMs run at 1 − r/100 of GPU 0's rate.
    let rel = summary
        .lines()
        .find(|l| l.starts_with("GEMM time per GPU"))
        .unwrap_or_else(|| panic!("{summary}"));
    assert!(
        rel.contains("1.000 1.010 1.020") && rel.contains("spread 7.5%"),
        "{rel}"
    );
    let per_gpu = KernelMeasurements::read(&out.join("dist-gemm-per-gpu.json")).unwrap();
    assert_eq!(per_gpu.gemm_sessions(), 8);
    assert_eq!(per_gpu.gemm.len(), 32);

    let file = out.join("dist-measurements.json");
    let m = KernelMeasurements::read(&file).unwrap();
    assert_eq!(m.device, "NVIDIA H200");
    assert_eq!(m.p2p.len(), plan["sendrecv"].as_array().unwrap().len());
    assert!(m.p2p.iter().all(|p| p.ranks == Some(8)));
    assert_eq!((m.gemm_sessions(), m.gemm.len()), (1, 4));
    assert_eq!(m.attention.len(), 1);
    let ag = m.collectives.iter().find(|c| c.op == "all-gather").unwrap();
    let bus = ag.bus_bytes_per_s.unwrap();
    assert!((bus - ag.bytes as f64 / ag.s * 7.0 / 8.0).abs() < 1e-6 * bus);

    // The fit recovers the link the data was made with.
    let fitted = dir.path().join("fitted.json");
    let o = Command::new(env!("CARGO_BIN_EXE_metp-sim"))
        .args(["calibrate", "--fit"])
        .arg(&file)
        .args(["--base", "hgx-h200", "--out"])
        .arg(&fitted)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let hw = metp_sim::config::load_hardware(fitted.to_str().unwrap()).unwrap();
    let b = hw.intra_node.bytes_per_s_per_direction.value;
    let a = hw.intra_node.p2p_latency_s.value;
    assert!((b / B_PER_S - 1.0).abs() < 0.02, "B = {b:e}");
    assert!((a / ALPHA_S - 1.0).abs() < 0.10, "α = {a:e}");
    assert!(
        hw.intra_node
            .bytes_per_s_per_direction
            .source
            .contains("were ring steps"),
        "{}",
        hw.intra_node.bytes_per_s_per_direction.source
    );

    // nccl-tests' columns: size, count (elements per rank), type, redop, root, time (µs),
    // algbw and busbw (GB/s) that follow from them.
    let log = std::fs::read_to_string(out.join("nccl-tests-all_gather.log")).unwrap();
    let rows: Vec<Vec<&str>> = log
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), plan["all_gather"].as_array().unwrap().len());
    for r in &rows {
        let size: f64 = r[0].parse().unwrap();
        let count: f64 = r[1].parse().unwrap();
        let (us, algbw, busbw): (f64, f64, f64) = (
            r[5].parse().unwrap(),
            r[6].parse().unwrap(),
            r[7].parse().unwrap(),
        );
        assert_eq!(count, size / 2.0 / 8.0, "{r:?}");
        assert_eq!(r[2], "bfloat16");
        assert!(
            (size / us / 1e3 - algbw).abs() <= 0.01 + 0.002 * algbw,
            "{r:?}"
        );
        assert!((algbw * 7.0 / 8.0 - busbw).abs() <= 0.011, "{r:?}");
    }
    assert!(log.contains("# Avg bus bandwidth"));

    // The logs are what `collectives --compare` and `calibrate --fit-links` read: the link
    // fitted from them is the one the data was made with.
    let logs: Vec<_> = ["sendrecv", "all_gather", "reduce_scatter"]
        .iter()
        .map(|op| out.join(format!("nccl-tests-{op}.log")))
        .collect();
    for (log, op) in logs
        .iter()
        .zip(["sendrecv", "all-gather", "reduce-scatter"])
    {
        let o = Command::new(env!("CARGO_BIN_EXE_metp-sim"))
            .args(["collectives", "--hw", "hgx-h200", "--op", op, "--compare"])
            .arg(log)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{op}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let links = dir.path().join("links.json");
    let o = Command::new(env!("CARGO_BIN_EXE_metp-sim"))
        .args(["calibrate", "--fit-links"])
        .args(&logs)
        .args(["--base", "hgx-h200", "--out"])
        .arg(&links)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let hw = metp_sim::config::load_hardware(links.to_str().unwrap()).unwrap();
    let b = hw.intra_node.bytes_per_s_per_direction.value;
    assert!((b / B_PER_S - 1.0).abs() < 0.02, "--fit-links: B = {b:e}");

    // A raw file that is not one: one line, exit 1.
    std::fs::write(&raw, "{\"ranks\": 8}").unwrap();
    let o = Command::new(&py)
        .arg(SCRIPT)
        .arg("--format")
        .arg(&raw)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("not a raw results file") && err.lines().count() == 1,
        "{err}"
    );
}

/// The script itself under torchrun, 2 ranks on the CPU (gloo, `--smoke`): when torch is
/// installed (`METP_SIM_TORCH_PYTHON` names a python with torch, else python3), else skipped.
#[test]
fn the_dist_script_runs_under_torchrun_on_the_cpu() {
    let py = std::env::var("METP_SIM_TORCH_PYTHON").unwrap_or_else(|_| "python3".into());
    let has_torch = Command::new(&py)
        .args(["-c", "import torch.distributed.run"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_torch {
        skipped(format_args!(
            "{py} cannot import torch (set METP_SIM_TORCH_PYTHON to a python with torch)"
        ));
        return;
    }
    let _cpu = crate::cpu_exclusive();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = Command::new("timeout")
        .args(["240", &py, "-m", "torch.distributed.run", "--standalone"])
        .args([
            "--nproc_per_node",
            "2",
            SCRIPT,
            "--smoke",
            "--budget-s",
            "20",
            "--out",
        ])
        .arg(&out)
        .env("OMP_NUM_THREADS", "1")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = KernelMeasurements::read(&out.join("dist-measurements.json")).unwrap();
    assert_eq!(m.p2p.len(), 3);
    assert!(m.p2p.iter().all(|p| p.ranks == Some(2)));
    assert_eq!(m.collectives.len(), 6);
    let per_gpu = KernelMeasurements::read(&out.join("dist-gemm-per-gpu.json")).unwrap();
    assert_eq!(per_gpu.gemm_sessions(), 2);
    assert!(Path::new(&out.join("nccl-tests-sendrecv.log")).exists());
}
