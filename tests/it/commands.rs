//! `simulate`, `sweep` and `overlap` from the command line.

use assert_cmd::Command;

fn cmd() -> Command {
    let mut c = Command::cargo_bin("metp-sim").unwrap();
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = cmd().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn simulate_prints_the_design_fields_and_writes_trace_and_timeline() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.json");
    let timeline = dir.path().join("t.svg");
    let v = json(&[
        "simulate",
        "--model",
        "gpt3-1.3b",
        "--method",
        "metp",
        "--p",
        "4",
        "--seq",
        "16k",
        "--format",
        "json",
        "--trace",
        trace.to_str().unwrap(),
        "--timeline",
        timeline.to_str().unwrap(),
        "--timeline-ms",
        "5",
    ]);
    for f in [
        "step_time_s",
        "compute_s",
        "communication_s",
        "exposed_communication_s",
        "overlap_efficiency",
        "peak_bytes",
        "tokens_per_s",
        "mfu",
        "analytic",
    ] {
        assert!(v.get(f).is_some(), "missing {f}");
    }
    assert!(
        v["analytic"].get("step_time_s").is_some() && v["analytic"].get("peak_bytes").is_some()
    );
    assert_eq!(v["peak_bytes"], v["simulated_memory_high_water_bytes"]);
    let t: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let events = t["traceEvents"].as_array().unwrap();
    // Ring steps are named in the trace, and there is a track per device stream and per link.
    assert!(events
        .iter()
        .any(|e| e["name"].as_str().is_some_and(|n| n.contains("kv"))));
    assert!(events.iter().any(|e| e["ph"] == "M"));
    let svg = std::fs::read_to_string(&timeline).unwrap();
    assert!(svg.contains("<svg") && svg.contains("gpu0"));
}

#[test]
fn sweep_writes_csv_json_and_plots_and_repeats_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let run = |out: &std::path::Path| {
        cmd()
            .args([
                "sweep",
                "--model",
                "gpt3-1.3b",
                "--seq",
                "4k..16k",
                "--p",
                "2,4",
                "--svg-only",
                "--out",
            ])
            .arg(out)
            .assert()
            .success();
    };
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    run(&a);
    run(&b);
    for f in [
        "sweep.csv",
        "sweep.json",
        "maxseq.svg",
        "memory-p2.svg",
        "step-time-p4.svg",
        "tokens-per-s-p2.svg",
        "exposed-comm-p4.svg",
    ] {
        let x = std::fs::read(a.join(f)).unwrap_or_else(|_| panic!("{f} not written"));
        assert_eq!(
            x,
            std::fs::read(b.join(f)).unwrap(),
            "{f} differs between runs"
        );
    }
    assert!(!a.join("sweep.csv.partial").exists());
    let csv = std::fs::read_to_string(a.join("sweep.csv")).unwrap();
    // 6 methods × 2 degrees × 3 lengths, plus the header; infeasible points are kept.
    assert_eq!(csv.lines().count(), 1 + 6 * 2 * 3);
    assert!(csv
        .lines()
        .next()
        .unwrap()
        .starts_with("model,hardware,method,p,seq,status"));
}

#[test]
fn sweep_rejects_bad_ranges() {
    for (seq, code) in [("8k..4k", 2), ("4k..8k:+0", 2), ("", 2)] {
        let out = cmd()
            .args(["sweep", "--seq", seq, "--out", "/tmp/never"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "--seq {seq:?}");
    }
    let out = cmd().args(["sweep", "--methods", "zeta"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// The overlap condition against the simulator on two profiles: exposed communication inside
/// the rings vanishes above the threshold and is clearly there below it.
#[test]
fn overlap_condition_matches_simulation_on_a100_and_h100() {
    for hw in ["dgx-a100-80gb", "dgx-h100"] {
        for ideal in [true, false] {
            let mut args = vec![
                "overlap",
                "--hw",
                hw,
                "--local-seq",
                "256..8k",
                "--format",
                "json",
            ];
            if ideal {
                args.push("--ideal-kernels");
            }
            let v = json(&args);
            let rows = v["rows"].as_array().unwrap();
            // Every row agrees, but on dgx-a100-80gb with ideal kernels the one at s/p = 2048,
            // 1.29× the closed-form attention threshold (1593): 2.5% of its attention ring is
            // exposed, the outer loop's weight broadcast, whose latency (NCCL's chain, 8.4 µs +
            // 7 hops at the library's A100 step latencies, derived from the Azure curve) the
            // closed form leaves out. Twice the threshold or more, nothing shows.
            for r in rows {
                let near = hw == "dgx-a100-80gb" && ideal && r["local_seq"] == 2048;
                if near {
                    let e = r["attention_ring_exposed_share"].as_f64().unwrap();
                    assert!(e < 0.04, "{hw}: {e}");
                } else {
                    assert!(r["agrees"] != false, "{hw} ideal={ideal}: {r:?}");
                }
            }
            // Both sides of the MLP threshold are visited.
            assert!(rows.iter().any(|r| r["mlp_condition_holds"] == false
                && r["mlp_ring_exposed_share"].as_f64().unwrap() > 0.02));
            assert!(rows.iter().any(|r| r["mlp_condition_holds"] == true
                && r["mlp_ring_exposed_share"].as_f64().unwrap() < 0.02));
            if ideal {
                // Without launch overhead the attention ring has a threshold near F/B too.
                assert!(rows.iter().any(|r| r["condition_holds"] == false
                    && r["attention_ring_exposed_share"].as_f64().unwrap() > 0.02));
                let t = v["threshold_local_seq"]["attention"].as_f64().unwrap();
                let fb = v["closed_form"]["f_over_b"].as_f64().unwrap();
                assert!(t > 0.7 * fb && t < 1.5 * fb, "{hw}: solved {t} vs F/B {fb}");
            }
        }
    }
}
