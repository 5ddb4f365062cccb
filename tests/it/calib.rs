//! Calibration on the mock backend: exact recovery of known figures, the written profile, the
//! `--force` and atomic-write guarantees, and the GPU plan through the same one path.

use std::path::Path;

use metp_sim::backend::mock::MockBackend;
use metp_sim::calibrate::{calibrate, Options, Plan, Report};
use metp_sim::config::load_hardware;
use metp_sim::Error;

fn opts(out: &Path, force: bool) -> Options {
    Options {
        quick: true,
        out: out.to_path_buf(),
        force,
        host: "testhost".into(),
        date: "2026-11-30".into(),
        unit_runs: 1,
        base: None,
        budget_s: None,
    }
}

fn mock_calibration(out: &Path) -> (MockBackend, metp_sim::Result<Report>) {
    let mut mock = MockBackend::new(MockBackend::truth_profile());
    let plan = Plan::for_mock();
    let r = calibrate(&mut mock, &plan, &opts(out, false), &mut |_| {});
    (mock, r)
}

pub(crate) fn close(got: f64, want: f64, tol: f64) -> bool {
    (got - want).abs() <= tol * want.abs().max(1e-300)
}

/// The mock's kernel times are exactly the truth's device times, messages `α + n/B` and the
/// slowdown `(1 + σ)·t`: the fit must give back the truth's figures — every rate (peak ×
/// mma_fraction: the base's peak is the best measured GEMM rate, so only the product is
/// determined), fixed time, bandwidth and latency to 1e-6 — and the units' predicted times
/// from the fitted profile must equal the "measured" ones, which the mock computes from the
/// truth.
#[test]
fn calib_mock_fit_recovers_the_known_profile() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mock.json");
    let (mock, r) = mock_calibration(&out);
    let r = r.unwrap();
    let (t, f) = (&mock.truth, &r.profile);
    let tol = 1e-6;
    let rate =
        |hw: &metp_sim::config::Hardware, frac: f64| hw.gpu.peak_bf16_flops_per_s.value * frac;
    let (tk, fk) = (&t.kernels, &f.kernels);
    for (what, got, want) in [
        (
            "hbm",
            f.gpu.hbm_bytes_per_s.value,
            t.gpu.hbm_bytes_per_s.value,
        ),
        (
            "memory latency",
            fk.memory.latency_s.value,
            tk.memory.latency_s.value,
        ),
        (
            "element-wise fraction",
            fk.memory.elementwise_fraction.value,
            tk.memory.elementwise_fraction.value,
        ),
        (
            "gemm rate",
            rate(f, fk.gemm.mma_fraction.value),
            rate(t, tk.gemm.mma_fraction.value),
        ),
        ("gemm tile_s", fk.gemm.tile_s.value, tk.gemm.tile_s.value),
        ("gemm call_s", fk.gemm.call_s.value, tk.gemm.call_s.value),
        (
            "fwd rate",
            rate(f, fk.attention_fwd.mma_fraction.value),
            rate(t, tk.attention_fwd.mma_fraction.value),
        ),
        (
            "fwd tile_s",
            fk.attention_fwd.tile_s.value,
            tk.attention_fwd.tile_s.value,
        ),
        (
            "fwd call_s",
            fk.attention_fwd.call_s.value,
            tk.attention_fwd.call_s.value,
        ),
        (
            "bwd rate",
            rate(f, fk.attention_bwd.mma_fraction.value),
            rate(t, tk.attention_bwd.mma_fraction.value),
        ),
        (
            "bwd tile_s",
            fk.attention_bwd.tile_s.value,
            tk.attention_bwd.tile_s.value,
        ),
        (
            "bwd call_s",
            fk.attention_bwd.call_s.value,
            tk.attention_bwd.call_s.value,
        ),
        (
            "link",
            f.intra_node.bytes_per_s_per_direction.value,
            t.intra_node.bytes_per_s_per_direction.value,
        ),
        (
            "latency",
            f.intra_node.p2p_latency_s.value,
            t.intra_node.p2p_latency_s.value,
        ),
        (
            "slowdown",
            f.overlap_compute_slowdown_fraction.value,
            t.overlap_compute_slowdown_fraction.value,
        ),
    ] {
        assert!(
            close(got, want, tol),
            "{what}: fitted {got:e}, truth {want:e}"
        );
    }
    // Every fitted parameter was determined by the plan on its own.
    for p in &r.fit.params {
        assert_eq!(
            format!("{:?}", p.status),
            "Fitted",
            "{}: {:?}",
            p.field,
            p.status
        );
    }
    assert_eq!(r.units.len(), 2);
    for u in &r.units {
        assert!(
            u.rel_error.abs() < 1e-6,
            "{:?}: {}",
            u.spec.unit,
            u.rel_error
        );
        assert!(!u.phases.is_empty());
        for p in &u.phases {
            assert!(p.rel_error.abs() < 1e-6, "{p:?}");
        }
    }
    // The measurements were written beside the profile, in the file format.
    let m = metp_sim::fitting::measurements::KernelMeasurements::read(
        &dir.path().join("mock.measurements.json"),
    )
    .unwrap();
    assert_eq!(m, r.measurements);
}

/// The written profile loads and validates through `config::load_hardware`, equals what was
/// reported, and every figure's source names the calibration, host and date.
#[test]
fn calib_written_profile_loads_and_every_source_is_calibrated() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mock.json");
    let (_, r) = mock_calibration(&out);
    let r = r.unwrap();
    let hw = load_hardware(out.to_str().unwrap()).unwrap();
    assert_eq!(hw, r.profile);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let mut sources = vec![];
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m {
                    if k == "source" {
                        out.push(x.as_str().unwrap_or_default().to_string());
                    }
                    walk(x, out);
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    walk(&v, &mut sources);
    // 8 GPU and link figures + 26 kernel-model figures + reserved + slowdown, at least.
    assert!(sources.len() >= 36, "{sources:?}");
    for s in &sources {
        assert!(
            s.starts_with(
                "calibrated by metp-sim calibrate --backend mock on testhost 2026-11-30: "
            ),
            "{s}"
        );
    }
}

/// An existing profile is never overwritten without `force`, and the refusal comes before any
/// measurement; with `force` it is replaced.
#[test]
fn calib_force_semantics() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.json");
    std::fs::write(&out, "keep me").unwrap();
    let mut mock = MockBackend::new(MockBackend::truth_profile());
    mock.fail_at = Some(0); // any measurement would fail: the refusal must come first
    let plan = Plan::for_mock();
    match calibrate(&mut mock, &plan, &opts(&out, false), &mut |_| {}) {
        Err(e @ Error::Exists { .. }) => {
            assert_eq!(e.exit_code(), 1);
            assert!(e.to_string().contains("--force"), "{e}");
        }
        other => panic!("expected Exists, got {other:?}"),
    }
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep me");
    let mut mock = MockBackend::new(MockBackend::truth_profile());
    calibrate(&mut mock, &plan, &opts(&out, true), &mut |_| {}).unwrap();
    assert!(load_hardware(out.to_str().unwrap()).is_ok());
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// A calibration that fails midway (the mock fails at its 6th measurement) leaves no profile
/// and no temporary file behind, and leaves an existing profile untouched even with `force`.
#[test]
fn calib_failure_midway_leaves_no_partial_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sub").join("p.json");
    let mut mock = MockBackend::new(MockBackend::truth_profile());
    mock.fail_at = Some(5);
    let plan = Plan::for_mock();
    let e = calibrate(&mut mock, &plan, &opts(&out, false), &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("failure injected"), "{e}");
    assert!(!out.exists());
    assert!(!out.parent().unwrap().exists() || leftovers(out.parent().unwrap()).is_empty());
    let out = dir.path().join("old.json");
    std::fs::write(&out, "old").unwrap();
    let mut mock = MockBackend::new(MockBackend::truth_profile());
    mock.fail_at = Some(7);
    assert!(calibrate(&mut mock, &plan, &opts(&out, true), &mut |_| {}).is_err());
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "old");
    assert_eq!(leftovers(dir.path()), vec!["old.json".to_string()]);
}

/// The CUDA backend's calibration path, on the mock: the GPU plan (its grid, units and time
/// budget) goes through the same measuring, fit and unit comparison as every backend — the
/// measurement file beside the profile, the GEMM plateau stated in the profile, the units
/// run, and neither file overwritten by a second run.
#[test]
fn the_gpu_plan_calibrates_through_the_one_path_on_the_mock() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mock.json");
    let mut o = opts(&out, false);
    // The mock's times follow a small profile, not a GPU, and take no real time.
    o.budget_s = Some(1e9);
    let mut plan = metp_sim::calibrate::grid::measurement_plan(2, true);
    plan.budget.as_mut().unwrap().seconds = 1e9;
    let mut b = MockBackend::new(MockBackend::truth_profile());
    let r = calibrate(&mut b, &plan, &o, &mut |_| {}).unwrap();
    let m =
        metp_sim::fitting::measurements::KernelMeasurements::read(&r.measurements_path).unwrap();
    assert_eq!(m.gemm.len(), plan.gemms.len());
    assert_eq!(m.attention.len(), plan.attention.len());
    assert!(m.attention.iter().any(|a| a.causal));
    assert!(out.exists());
    assert!(r
        .profile
        .kernels
        .gemm
        .mma_fraction
        .source
        .contains("plateau"));
    assert_eq!(r.units.len(), plan.units.len());
    assert!(r
        .notes
        .iter()
        .any(|n| n.contains("of a 1000000000 s budget")));
    // A second run refuses to overwrite either file.
    assert!(calibrate(&mut b, &plan, &o, &mut |_| {}).is_err());
}
