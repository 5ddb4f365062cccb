//! The calibration commands on the CPU: `run` and `calibrate` measure, compare and write a
//! profile, and the CUDA backend refuses cleanly without a GPU (the tests on CPU timings are
//! tests/timing).

use assert_cmd::Command;
use metp_sim::config::load_hardware;

fn cmd() -> Command {
    let mut c = Command::cargo_bin("metp-sim").unwrap();
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

/// `run --backend cpu` on a small METP unit prints DESIGN §8's fields; the unit is correct to
/// f32 rounding and its measured peak equals the closed form.
#[test]
fn calib_cli_run_cpu_prints_the_design_fields() {
    for unit in ["attention", "mlp"] {
        let v = super::common::cli_json(&[
            "run",
            "--backend",
            "cpu",
            "--unit",
            unit,
            "--p",
            "2",
            "--seq",
            "64",
            "--hidden",
            "32",
            "--heads",
            "4",
            "--ffn",
            "64",
            "--format",
            "json",
        ]);
        for f in [
            "max_rel_error",
            "measured_peak_bytes",
            "tracked_peak_bytes",
            "predicted_peak_bytes",
            "measured_time_s",
            "predicted_time_s",
        ] {
            assert!(v.get(f).is_some(), "{unit}: missing {f}");
        }
        assert!(v["max_rel_error"].as_f64().unwrap() < 1e-5, "{v}");
        assert_eq!(v["measured_peak_bytes"], v["predicted_peak_bytes"]);
        // On the CPU the runtime's tracked buffers are its allocations: one figure.
        assert_eq!(v["tracked_peak_bytes"], v["measured_peak_bytes"]);
        assert!(v["measured_time_s"].as_f64().unwrap() > 0.0);
        assert!(v["predicted_time_s"].as_f64().unwrap() > 0.0);
        assert!(v["notes"][0].as_str().unwrap().contains("memory inventory"));
    }
    // The table form too, for TP (no inventory peak).
    let out = cmd()
        .args([
            "run", "--unit", "mlp", "--method", "tp", "--seq", "32", "--hidden", "16", "--ffn",
            "32", "--heads", "2",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("max_rel_error") && text.contains("predicted_time_s"),
        "{text}"
    );
}

/// `run --kv-heads` (grouped-query attention) and `--activation swiglu` on the CPU: the
/// reference agrees and METP's memory is the inventory's; a model brings its own (LLaMA-2 70B:
/// 8 K/V heads, SwiGLU); a K/V head count the heads are no multiple of is a usage error.
#[test]
fn calib_cli_runs_grouped_query_attention_and_swiglu() {
    let small = ["--hidden", "32", "--heads", "4", "--ffn", "64"];
    for args in [
        vec!["--unit", "attention", "--kv-heads", "2", "--causal"],
        vec!["--unit", "mlp", "--activation", "swiglu"],
    ]
    .into_iter()
    .map(|a| [&small[..], &a[..]].concat())
    .chain([
        vec![
            "--unit",
            "mlp",
            "--model",
            "llama2-70b",
            "--hidden",
            "64",
            "--ffn",
            "64",
        ],
        vec![
            "--unit",
            "attention",
            "--model",
            "llama2-70b",
            "--hidden",
            "128",
            "--ffn",
            "64",
        ],
    ]) {
        let out = cmd()
            .args(["run", "--seq", "32"])
            .args(&args)
            .args(["--format", "json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v["max_rel_error"].as_f64().unwrap() < 1e-5, "{args:?}: {v}");
        assert_eq!(
            v["measured_peak_bytes"], v["predicted_peak_bytes"],
            "{args:?}"
        );
    }
    let out = cmd()
        .args(["run", "--heads", "4", "--kv-heads", "3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--kv-heads"));
}

/// Without a GPU (or without the `cuda` feature) the CUDA backend refuses with one line and
/// exit status 1, never a panic.
#[test]
fn calib_cli_cuda_fails_cleanly_without_a_gpu() {
    if metp_sim::backend::cuda::probe().is_ok() {
        eprintln!("skipped: a CUDA device is present; this test checks the refusal without one");
        return;
    }
    for args in [
        vec!["run", "--backend", "cuda", "--unit", "attention"],
        vec![
            "calibrate",
            "--backend",
            "cuda",
            "--quick",
            "--out",
            "/nonexistent/x.json",
        ],
    ] {
        let out = cmd().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("cuda") && !err.contains("panicked"), "{err}");
    }
}

/// `calibrate --backend cpu --quick` measures, writes a loadable profile, runs both METP units
/// and reports predicted and measured; a second run without `--force` is refused (exit 1, one
/// line) and leaves the profile as it was.
#[test]
fn calib_cli_calibrate_cpu_quick_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cpu.json");
    let t0 = std::time::Instant::now();
    let o = cmd()
        .args([
            "calibrate",
            "--backend",
            "cpu",
            "--quick",
            "--format",
            "json",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    eprintln!("calibrate --quick took {:.1} s", t0.elapsed().as_secs_f64());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let hw = load_hardware(out.to_str().unwrap()).unwrap();
    assert!(hw.gpu.peak_bf16_flops_per_s.value > 0.0);
    assert!(hw
        .gpu
        .peak_bf16_flops_per_s
        .source
        .starts_with("calibrated by metp-sim calibrate --backend cpu on "));
    let units = v["units"].as_array().unwrap();
    assert_eq!(units.len(), 2);
    for u in units {
        assert!(u["predicted"]["time_s"].as_f64().unwrap() > 0.0);
        assert!(u["measured_time_s"].as_f64().unwrap() > 0.0);
        assert!(u["max_rel_error"].as_f64().unwrap() < 1e-5);
        assert!(u["rel_error"].as_f64().unwrap().is_finite());
        assert!(!u["phases"].as_array().unwrap().is_empty());
    }
    // The GPU check's closing table reads this report's units, and a `kernels --compare`
    // report's errors per kind, as the commands write them.
    let units_json = dir.path().join("calibrate.json");
    std::fs::write(&units_json, &o.stdout).unwrap();
    let k = cmd()
        .args([
            "kernels",
            "--hw",
            "hgx-h200",
            "--input",
            "hardware-profiles/measurements/h200-pytorch-2026-11-30.json",
            "--compare",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(k.status.success(), "{k:?}");
    let compare_json = dir.path().join("compare.json");
    std::fs::write(&compare_json, &k.stdout).unwrap();
    let t = cmd()
        .args(["gpu-check", "table", "--compare"])
        .arg(&compare_json)
        .arg("--units")
        .arg(&units_json)
        .output()
        .unwrap();
    assert!(t.status.success(), "{t:?}");
    let table = String::from_utf8(t.stdout).unwrap();
    assert!(
        table.contains("metp attention p=2")
            && table.contains("attention fwd")
            && !table.contains("note:"),
        "{table}"
    );
    let before = std::fs::read_to_string(&out).unwrap();
    let o = cmd()
        .args(["calibrate", "--backend", "cpu", "--quick", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("exists; pass --force"), "{err}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), before);
}
