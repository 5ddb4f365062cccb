//! `metp-sim plan`: answers for one and eight nodes, rejections with reasons, determinism, bad
//! input, and agreement of the extrapolated simulation with `simulate`.

use assert_cmd::Command;
use metp_sim::config::{load_hardware, load_model, MethodId};
use metp_sim::plan::{self, PlanSpec, RejectCategory};
use serde_json::Value;

fn cmd() -> Command {
    let mut c = Command::cargo_bin("metp-sim").unwrap();
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

fn run(args: &[&str]) -> (Value, Vec<u8>) {
    let out = cmd().arg("plan").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (serde_json::from_slice(&out.stdout).unwrap(), out.stdout)
}

/// The properties every answer has: ranks 1..n, tokens/s not increasing, every listed
/// configuration within device memory with headroom = capacity − peak, and the DESIGN-style
/// field names.
fn check_ranked(v: &Value) -> &Vec<Value> {
    let ranked = v["ranked"].as_array().unwrap();
    let mut last = f64::INFINITY;
    for (i, r) in ranked.iter().enumerate() {
        for f in [
            "method",
            "p",
            "dp",
            "micro_batch",
            "micro_batches",
            "recompute",
            "zero",
            "step_time_s",
            "tokens_per_s",
            "mfu",
            "peak_bytes",
            "headroom_bytes",
            "exposed_communication_s",
        ] {
            assert!(r.get(f).is_some(), "missing {f} in {r}");
        }
        assert_eq!(r["rank"].as_u64(), Some(i as u64 + 1));
        let t = r["tokens_per_s"].as_f64().unwrap();
        assert!(t > 0.0 && t <= last, "not ranked by tokens/s: {ranked:?}");
        last = t;
        let peak = r["peak_bytes"].as_u64().unwrap();
        let cap = r["capacity_bytes"].as_u64().unwrap();
        assert!(peak <= cap, "{r}");
        assert_eq!(r["headroom_bytes"].as_u64().unwrap(), cap - peak);
        let axis = |k: &str| r[k].as_u64().unwrap();
        assert_eq!(
            axis("p") * axis("cp") * axis("pp") * axis("dp"),
            v["gpus"].as_u64().unwrap()
        );
        let mfu = r["mfu"].as_f64().unwrap();
        assert!(mfu > 0.0 && mfu < 1.0, "{r}");
        let exposed = r["exposed_communication_s"].as_f64().unwrap();
        assert!(exposed >= 0.0 && exposed <= r["step_time_s"].as_f64().unwrap());
    }
    ranked
}

#[test]
fn one_node_ranks_feasible_configurations_and_reports_rejections() {
    let (v, _) = run(&[
        "--model",
        "llama2-7b",
        "--gpus",
        "8",
        "--seq",
        "128k",
        "--top",
        "3",
        "--format",
        "json",
    ]);
    assert_eq!(v["nodes"], 1);
    let ranked = check_ranked(&v);
    assert_eq!(ranked.len(), 3);
    // METP fits 128k on one node (README: 42 GiB at p = 8).
    assert!(ranked.iter().any(|r| r["method"] == "metp"), "{ranked:?}");
    // Pure data parallelism of a 7B model at 128k does not fit without full recomputation:
    // tp at p = 1 with nothing recomputed is rejected for memory, with the figures.
    let rejected = v["rejected"].as_array().unwrap();
    assert_eq!(
        v["rejected_total"].as_u64().unwrap(),
        rejected.len() as u64 + v["rejected_omitted"].as_u64().unwrap()
    );
    let total: u64 = v["rejected_by_reason"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(total, v["rejected_total"].as_u64().unwrap());
    for r in rejected {
        assert!(!r["reason"].as_str().unwrap().is_empty());
    }
}

#[test]
fn eight_nodes_rank_and_reject_invalid_degrees() {
    // Eight nodes at 512k; simulating only the analytic best keeps the debug build quick.
    let (v, _) = run(&[
        "--model",
        "llama2-7b",
        "--gpus",
        "64",
        "--seq",
        "512k",
        "--top",
        "1",
        "--sim-candidates",
        "1",
        "--max-rejected",
        "1000",
        "--no-outer-axes",
        "--format",
        "json",
    ]);
    assert_eq!(v["nodes"], 8);
    let ranked = check_ranked(&v);
    assert_eq!(ranked.len(), 1);
    // 32 heads: no method that splits heads runs at p = 64.
    let rejected = v["rejected"].as_array().unwrap();
    let metp64 = rejected
        .iter()
        .find(|r| r["method"] == "metp" && r["p"] == 64)
        .expect("metp at p = 64 is rejected");
    assert_eq!(metp64["category"], "invalid-degree");
    assert!(metp64["reason"].as_str().unwrap().contains("heads (32)"));
    // Every out-of-memory rejection names its peak, above device memory.
    let cap = ranked[0]["capacity_bytes"].as_u64().unwrap();
    for r in rejected.iter().filter(|r| r["category"] == "out-of-memory") {
        assert!(r["peak_bytes"].as_u64().unwrap() > cap, "{r}");
        assert!(r["reason"].as_str().unwrap().contains("GiB > capacity"));
    }
}

#[test]
fn nothing_fits_is_an_answer_with_reasons() {
    // LLaMA-2 70B at 512k tokens on one node: every configuration runs out of memory.
    let out = cmd()
        .args([
            "plan",
            "--model",
            "llama2-70b",
            "--gpus",
            "8",
            "--seq",
            "512k",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ranked"].as_array().unwrap().len(), 0);
    assert_eq!(v["feasible"], 0);
    assert!(v["message"].as_str().unwrap().contains("no configuration"));
    assert_eq!(
        v["rejected_by_reason"]["out-of-memory"],
        v["rejected_total"]
    );
    let table = cmd()
        .args([
            "plan",
            "--model",
            "llama2-70b",
            "--gpus",
            "8",
            "--seq",
            "512k",
        ])
        .output()
        .unwrap();
    assert_eq!(table.status.code(), Some(0));
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(
        text.contains("no configuration of LLaMA-2 70B fits"),
        "{text}"
    );
    assert!(text.contains("out-of-memory:"), "{text}");
}

#[test]
fn same_command_gives_the_same_bytes() {
    let args = [
        "--gpus",
        "8",
        "--seq",
        "64k",
        "--global-batch",
        "4",
        "--top",
        "3",
        "--format",
        "json",
    ];
    let (v, a) = run(&args);
    let (_, b) = run(&args);
    assert_eq!(a, b);
    // A global batch of 4 over dp replicas: micro-batch × micro-batches × dp = 4.
    for r in check_ranked(&v) {
        let n = r["micro_batch"].as_u64().unwrap()
            * r["micro_batches"].as_u64().unwrap()
            * r["dp"].as_u64().unwrap();
        assert_eq!(n, 4, "{r}");
    }
}

#[test]
fn sequence_granule_and_global_batch_reject_pairs_with_reasons() {
    // 12 GPUs: degrees 1, 2, 3, 4, 6, 12 with dp 12, 6, 4, 3, 2, 1. A global batch of 4 needs
    // dp | 4, which rejects p = 1, 2 and 4; s = 98310 = 6 × 16385 is a multiple of 3 and 6 but
    // not of 12, which ring attention needs at p = 12.
    let mut spec = PlanSpec::new(
        load_model("llama2-7b").unwrap(),
        load_hardware("dgx-a100-80gb").unwrap(),
        12,
        98_310,
    );
    spec.global_batch = Some(4);
    spec.methods = vec![MethodId::Ring];
    // Method × p × dp only: the pipeline splits are tested below.
    spec.outer_axes = false;
    let (candidates, rejected, _) = plan::enumerate(&spec).unwrap();
    let reason = |p: u64| {
        rejected
            .iter()
            .find(|r| r.p == p)
            .map(|r| (r.category, r.reason.clone()))
    };
    for p in [1, 2, 4] {
        let (cat, text) = reason(p).unwrap();
        assert_eq!(cat, RejectCategory::GlobalBatch);
        assert!(
            text.contains("global batch 4 is not a multiple of dp"),
            "{text}"
        );
    }
    let (cat, text) = reason(12).unwrap();
    assert_eq!(cat, RejectCategory::SeqMultiple);
    assert!(text.contains("not a multiple of 12"), "{text}");
    assert!(reason(3).is_none() && reason(6).is_none());
    let mut degrees: Vec<u64> = candidates.iter().map(|c| c.p).collect();
    degrees.dedup();
    assert_eq!(degrees, [3, 6]);
    assert!(candidates
        .iter()
        .all(|c| c.p * c.dp == 12 && c.micro_batch * c.micro_batches * c.dp == 4));
    // p = 6, dp = 2: two sequences per replica, as 1 × 2 or 2 × 1.
    assert!(candidates
        .iter()
        .any(|c| c.p == 6 && c.micro_batch == 2 && c.micro_batches == 1));
}

#[test]
fn bad_input_is_a_clear_error() {
    for (args, code) in [
        (vec!["--gpus", "0", "--seq", "4k"], 2),
        (vec!["--gpus", "8", "--seq", "0"], 2),
        (vec!["--gpus", "8", "--seq", "abc"], 2),
        (vec!["--gpus", "100000", "--seq", "4k"], 2),
        (vec!["--gpus", "8", "--seq", "4k", "--methods", "foo"], 2),
        (vec!["--gpus", "8", "--seq", "4k", "--top", "0"], 2),
        (vec!["--gpus", "8", "--seq", "4k", "--global-batch", "0"], 2),
        (
            vec!["--gpus", "8", "--seq", "4k", "--global-batch", "1m"],
            2,
        ),
        (vec!["--seq", "4k"], 2),
        (vec!["--gpus", "8", "--seq", "4k", "--model", "nope"], 1),
    ] {
        let out = cmd().arg("plan").args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(code), "{args:?}: {out:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.starts_with("error:"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn the_best_configuration_matches_simulate() {
    // The plan's step time (2- and 4-layer simulations extrapolated to 32 layers) against
    // `simulate` of the same configuration (all 32 layers, every micro-batch). METP at 128k
    // with six sequences per step: the best splits them over two replicas of four GPUs, three
    // micro-batches each (extrapolated from one and two), with ZeRO over the replicas.
    let (v, _) = run(&[
        "--gpus",
        "8",
        "--seq",
        "128k",
        "--global-batch",
        "6",
        "--methods",
        "metp",
        "--top",
        "1",
        "--format",
        "json",
    ]);
    let best = &check_ranked(&v)[0];
    let s = |k: &str| best[k].to_string().trim_matches('"').to_string();
    assert!(s("dp") != "1" && s("p") != "1", "{best}");
    assert!(best["micro_batches"].as_u64().unwrap() >= 3, "{best}");
    let out = cmd()
        .args([
            "simulate",
            "--method",
            &s("method"),
            "--p",
            &s("p"),
            "--dp",
            &s("dp"),
            "--nodes",
            "1",
            "--seq",
            "128k",
            "--global-batch",
            "6",
            "--micro-batch",
            &s("micro_batch"),
            "--recompute",
            &s("recompute"),
            "--zero",
            &s("zero"),
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let sim: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sim["micro_batches"], best["micro_batches"]);
    let a = best["step_time_s"].as_f64().unwrap();
    let b = sim["step_time_s"].as_f64().unwrap();
    assert!((a - b).abs() / b < 1e-4, "plan {a} vs simulate {b}");
    assert_eq!(best["peak_bytes"], sim["peak_bytes"]);
    let e = sim["exposed_communication_s"].as_f64().unwrap();
    assert!((best["exposed_communication_s"].as_f64().unwrap() - e).abs() < 1e-4 * b);
}

/// The outer axes: on 16 GPUs with a 32-layer model, tp-sp is tried with context parallelism
/// and every method with pipeline stages (pp dividing both 16/(p·cp) and the 32 layers) and
/// interleaving v = 2 where pp·v divides the layers; the default global batch is one sequence
/// per replica and stage (dp · pp), so m = pp micro-batches fill each pipeline; every
/// candidate uses all 16 GPUs.
#[test]
fn outer_axes_are_enumerated_with_megatrons_rules() {
    let spec = PlanSpec::new(
        load_model("llama2-7b").unwrap(),
        load_hardware("dgx-a100-80gb").unwrap(),
        16,
        32_768,
    );
    let (candidates, _, _) = plan::enumerate(&spec).unwrap();
    // Every interleave divides the layers of the fullest stage, with no more virtual stages
    // than layers; every configuration trains the one global batch (the default at 32k: 128).
    assert!(candidates.iter().all(|c| {
        let o = c.outer;
        c.p * o.cp * o.pp * c.dp == 16
            && (o.cp == 1 || c.method == MethodId::TpSp)
            && 32u64.div_ceil(o.pp) % o.interleave == 0
            && o.pp * o.interleave <= 32
            && (o.interleave == 1 || (o.pp > 1 && c.micro_batches % o.pp == 0))
            && c.micro_batch * c.micro_batches * c.dp == 128
    }));
    let has = |m: MethodId, cp: u64, pp: u64, v: u64| {
        candidates.iter().any(|c| {
            c.method == m && c.outer.cp == cp && c.outer.pp == pp && c.outer.interleave == v
        })
    };
    assert!(has(MethodId::TpSp, 2, 1, 1) && has(MethodId::TpSp, 16, 1, 1));
    assert!(has(MethodId::Metp, 1, 16, 1) && has(MethodId::Ulysses, 1, 4, 2));
    assert!(has(MethodId::TpSp, 1, 2, 16) && has(MethodId::Tp, 1, 4, 8));
    assert!(!has(MethodId::Metp, 2, 1, 1) && !has(MethodId::Ring, 1, 1, 2));
}

/// `--param-gather overlapped` applies to the candidates it concerns (ZeRO 1–2) and is cleared
/// for the others: no candidate is rejected for it (the same configurations are evaluated and
/// rejected as without), the header's JSON carries it, the ranked step times of ZeRO 1
/// candidates with replicas move and those of ZeRO 0 candidates do not.
#[test]
fn software_options_reach_only_the_candidates_they_concern() {
    let base = [
        "--model",
        "llama2-7b",
        "--gpus",
        "16",
        "--seq",
        "4k",
        "--global-batch",
        "128",
        "--zero",
        "0,1",
        "--methods",
        "tp-sp",
        "--top",
        "60",
        "--format",
        "json",
    ];
    let (plain, _) = run(&base);
    let mut args = base.to_vec();
    args.extend(["--param-gather", "overlapped"]);
    let (with, _) = run(&args);
    for key in ["evaluated", "rejected_total", "feasible"] {
        assert_eq!(plain[key], with[key], "{key}");
    }
    assert!(plain.get("param_gather").is_none());
    assert_eq!(with["param_gather"], "overlapped");
    let step = |v: &Value, zero: u64| -> Vec<f64> {
        let mut s: Vec<f64> = check_ranked(v)
            .iter()
            .filter(|r| r["zero"] == zero && r["dp"].as_u64().unwrap() > 1)
            .map(|r| r["step_time_s"].as_f64().unwrap())
            .collect();
        s.sort_by(f64::total_cmp);
        s
    };
    assert_ne!(
        step(&plain, 1),
        step(&with, 1),
        "ZeRO 1 candidates priced alike"
    );
    // The ZeRO 0 candidates both lists show are priced the same (others may move in or out
    // of the top rows around them).
    let (a, b) = (step(&plain, 0), step(&with, 0));
    let n = a.len().min(b.len());
    assert!(n > 0, "no ZeRO 0 candidate with replicas ranked");
    assert_eq!(a[..n], b[..n], "ZeRO 0 candidates moved");
}
