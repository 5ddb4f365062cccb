//! Issue 22, class 2 — `calibrate --fit`, `kernels` and `gpu-check` accepted measurements no GPU
//! can produce: a GEMM in 5e-324 s (a profile written whose LLaMA-7B step took 2e8 s) or
//! 1e300 s, 2^40-sized GEMMs and attention calls, a copy at 1.1e21 B/s, an eager op of
//! 5e-324 s, a message from a device to itself, collectives over 2^32 − 1 ranks, one GEMM
//! shape timed from 1e-6 to 100 s, GEMMs 10^4× faster than the GPU's peak, attention with more
//! K/V heads than query heads or K/V heads that do not divide them; `gpu-check table` printed a
//! negative median |error| and "met" for a kind with 0 samples. Each is refused in one line
//! naming the entry (`calibrate::bounds`, bounds in `config::limits`), before anything is
//! fitted, priced or written.

use std::path::Path;

use serde_json::{json, Value};

use super::{refuses, succeeds, write};

fn shared() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("hardware-profiles/measurements/h200-pytorch-2026-11-30.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Expects `kernels --input FILE --compare` and `gpu-check split` to refuse `m` naming
/// `want`.
fn refused_everywhere(dir: &Path, name: &str, m: &Value, want: &str) {
    let path = write(dir, &format!("{name}.json"), m);
    let e = refuses(&["kernels", "--input", &path, "--compare"], 1);
    assert!(
        e.contains(want),
        "{name}: kernels: expected '{want}' in {e}"
    );
    let (fit, held) = (
        dir.join(format!("{name}-fit.json")),
        dir.join(format!("{name}-held.json")),
    );
    let e = refuses(
        &[
            "gpu-check",
            "split",
            "--input",
            &path,
            "--fit",
            fit.to_str().unwrap(),
            "--held-out",
            held.to_str().unwrap(),
        ],
        1,
    );
    assert!(e.contains(want), "{name}: split: expected '{want}' in {e}");
    assert!(!fit.exists() && !held.exists());
}

#[test]
fn measurements_no_gpu_can_produce_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let base = shared();
    // The real file passes.
    let path = write(tmp.path(), "real.json", &base);
    succeeds(&["kernels", "--input", &path, "--compare"]);
    type Tamper = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Tamper, &str)> = vec![
        (
            "tiny",
            Box::new(|m| m["gemm"][0]["s"] = json!(5e-324)),
            "gemm[0].s",
        ),
        (
            "huge",
            Box::new(|m| m["gemm"][0]["s"] = json!(1e300)),
            "gemm[0].s",
        ),
        (
            "gemm-2-40",
            Box::new(|m| m["gemm"][0]["m"] = json!(1u64 << 40)),
            "gemm[0]",
        ),
        (
            "attention-2-40",
            Box::new(|m| m["attention"][0]["s"] = json!(1u64 << 40)),
            "attention[0]",
        ),
        (
            "copy-1e21",
            Box::new(|m| {
                m["copy"][0]["bytes"] = json!(1u64 << 40);
                m["copy"][0]["copy_s"] = json!(2e-9);
            }),
            "copy[0].copy_s",
        ),
        (
            "eager",
            Box::new(|m| m["eager_op_s"] = json!(5e-324)),
            "eager_op_s",
        ),
        (
            "p2p-self",
            Box::new(|m| m["p2p"] = json!([{"from": 3, "to": 3, "bytes": 1048576, "s": 1e-4}])),
            "p2p[0]",
        ),
        (
            "ranks",
            Box::new(|m| {
                m["collectives"] = json!([{"op": "all-reduce", "ranks": 4294967295u64, "bytes": 1048576, "s": 1e-3}])
            }),
            "collectives[0].ranks",
        ),
        (
            "spread",
            Box::new(|m| {
                let mut g = m["gemm"][0].clone();
                g["s"] = json!(100.0);
                m["gemm"][0]["s"] = json!(1e-6);
                m["gemm"].as_array_mut().unwrap().push(g);
            }),
            "same kernel",
        ),
        (
            "kv-above",
            Box::new(|m| m["attention"][0]["kv_heads"] = json!(32)),
            "attention[0]",
        ),
        (
            "kv-not-dividing",
            Box::new(|m| m["attention"][0]["kv_heads"] = json!(3)),
            "do not divide",
        ),
    ];
    for (name, tamper, want) in cases {
        let mut m = base.clone();
        tamper(&mut m);
        refused_everywhere(tmp.path(), name, &m, want);
    }
}

/// GEMMs 10^4 times faster than they ran are faster than any profile may describe (10^18
/// FLOP/s); 10^3 times faster, within that but not within this GPU's peak: `calibrate --fit`
/// and `kernels` refuse them against the profile, before a profile is written.
#[test]
fn measurements_faster_than_the_profiles_peak_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let faster = |by: f64| {
        let mut m = shared();
        for g in m["gemm"].as_array_mut().unwrap() {
            g["s"] = json!(g["s"].as_f64().unwrap() / by);
        }
        m
    };
    let path = write(tmp.path(), "faster.json", &faster(1e4));
    let e = refuses(&["kernels", "--input", &path], 1);
    assert!(e.contains("faster than any GPU"), "{e}");
    let path = write(tmp.path(), "fast.json", &faster(1e3));
    let out = tmp.path().join("fitted.json");
    let e = refuses(
        &[
            "calibrate",
            "--fit",
            &path,
            "--base",
            "hgx-h200",
            "--out",
            out.to_str().unwrap(),
        ],
        1,
    );
    assert!(
        e.contains("gemm[0].s") && e.contains("faster than its GPU"),
        "{e}"
    );
    assert!(!out.exists());
    let e = refuses(
        &["kernels", "--hw", "hgx-h200", "--input", &path, "--compare"],
        1,
    );
    assert!(e.contains("faster than its GPU"), "{e}");
    // A kernel list is held to the same bounds.
    let list = json!([{"op": "gemm", "m": 8192, "n": 8192, "k": 8192, "measured_s": 1e-4}]);
    let path = write(tmp.path(), "list.json", &list);
    let e = refuses(&["kernels", "--input", &path, "--compare"], 1);
    assert!(e.contains("faster than its GPU"), "{e}");
}

/// `gpu-check table` reads other commands' JSON: a negative median |error| or a kind with no
/// samples is reported as an unusable file, never as a goal met.
#[test]
fn the_gpu_check_table_shows_no_impossible_error() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, field, value) in [
        ("negative", "median_abs_error", json!(-0.3)),
        ("empty", "samples", json!(0)),
    ] {
        let report = json!({"kernels": [], "by_kind": [
            {"kind": "gemm", "samples": 4, "median_abs_error": 0.02, "max_abs_error": 0.04}
        ]});
        let mut r = report.clone();
        r["by_kind"][0][field] = value;
        let path = write(tmp.path(), &format!("{name}.json"), &r);
        let out = succeeds(&["gpu-check", "table", "--compare", &path]);
        assert!(!out.contains("-30.0%"), "{out}");
        assert!(!out.contains(" met"), "{name}: {out}");
        assert!(out.contains(&format!("{name}.json")), "{out}");
    }
}
