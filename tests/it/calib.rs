//! Calibration: exact recovery of known figures on the mock backend, the written profile, the
//! `--force` and atomic-write guarantees, the `run` and `calibrate` commands on the CPU, the
//! CUDA backend's clean refusal without a GPU (the tests on CPU timings are tests/timing).

use std::path::Path;

use assert_cmd::Command;
use metp_sim::backend::mock::MockBackend;
use metp_sim::calibrate::{calibrate, Options, Plan, Report};
use metp_sim::config::load_hardware;
use metp_sim::Error;

fn cmd() -> Command {
    let mut c = Command::cargo_bin("metp-sim").unwrap();
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

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

fn close(got: f64, want: f64, tol: f64) -> bool {
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

/// `file` (a measurement file as JSON) written, read back as `calibrate --fit` reads it, and
/// fitted from the bundled `hgx-h200`.
fn fit_file(
    file: &serde_json::Value,
) -> (
    metp_sim::fitting::measurements::KernelMeasurements,
    metp_sim::fitting::kernel_fit::FitReport,
) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.json");
    std::fs::write(&p, file.to_string()).unwrap();
    let m = metp_sim::fitting::measurements::KernelMeasurements::read(&p).unwrap();
    let base = load_hardware("hgx-h200").unwrap();
    let r =
        metp_sim::fitting::kernel_fit::fit_profile(&m, &base, &|w| format!("test: {w}")).unwrap();
    (m, r)
}

/// Copies and element-wise passes that are pure latency (the same time at every size, as tiny
/// kernels on a loaded CPU measure) do not bound the memory bandwidth: the fit used to run it
/// off to ~1e32 B/s, which profile validation then refused ("the fitted profile is invalid").
/// The search is bounded by the range the figure may take; the bandwidth is held at the
/// range's upper edge, valid, and reported as not determined by the data.
#[test]
fn calib_latency_bound_copies_leave_the_bandwidth_undetermined_and_in_range() {
    use metp_sim::config::limits::PROFILE_RATE_RANGE;
    use metp_sim::fitting::kernel_fit::fit_profile;
    let copy: Vec<serde_json::Value> = (12..=22)
        .map(|e| serde_json::json!({"bytes": 1u64 << e, "copy_s": 5e-6, "mul_s": 5e-6}))
        .collect();
    let file = serde_json::json!({
        "what": "synthetic: latency-bound copies",
        "date": "2026-11-30",
        "device": "test",
        "software": "test",
        "timing": "device",
        "copy": copy,
    });
    let (m, r) = fit_file(&file);
    r.profile
        .validate(Path::new("<fitted>"))
        .expect("the fitted profile validates");
    let bw = &r.profile.gpu.hbm_bytes_per_s;
    let (lo, hi) = PROFILE_RATE_RANGE;
    assert!(
        bw.value.is_finite() && bw.value >= lo && bw.value <= hi,
        "{}",
        bw.value
    );
    let p = r
        .params
        .iter()
        .find(|p| p.field == "gpu.hbm_bytes_per_s")
        .unwrap();
    assert_eq!(format!("{:?}", p.status), "Unbounded", "{p:?}");
    assert!(
        bw.source.contains("NOT determined by the data"),
        "{}",
        bw.source
    );
    // The latency is what the samples measure.
    let lat = r.profile.kernels.memory.latency_s.value;
    assert!((lat / 5e-6 - 1.0).abs() < 1e-3, "latency {lat}");
    // A refit from the result gives the result.
    let again = fit_profile(&m, &r.profile, &|w| format!("test: {w}")).unwrap();
    assert_eq!(again.profile.gpu.hbm_bytes_per_s.value, bw.value);
}

/// The same for the link: point-to-point messages whose time hardly grows with size (a slope
/// of 1e-21 s/byte, 1e21 B/s) leave the link's bandwidth at its range's edge, valid and said
/// to be undetermined, with the latency refitted there.
#[test]
fn calib_latency_bound_messages_leave_the_link_bandwidth_in_range() {
    let p2p: Vec<serde_json::Value> = (10..=20)
        .map(|e| {
            let n = (1u64 << e) as f64;
            serde_json::json!({"from": 0, "to": 1, "bytes": 1u64 << e, "s": 2e-6 + n * 1e-21})
        })
        .collect();
    let file = serde_json::json!({
        "what": "synthetic: latency-bound messages",
        "date": "2026-11-30",
        "device": "test",
        "software": "test",
        "p2p": p2p,
    });
    let (_, r) = fit_file(&file);
    let b = &r.profile.intra_node.bytes_per_s_per_direction;
    assert_eq!(b.value, 1e18);
    assert!(
        b.source.contains("NOT determined by the data"),
        "{}",
        b.source
    );
    let a = r.profile.intra_node.p2p_latency_s.value;
    assert!((a / 2e-6 - 1.0).abs() < 1e-6, "latency {a}");
}

/// GEMMs from two measurement sessions, the second at 0.85× the first's tensor-core clock, each
/// timed exactly as the truth prices them: the fit gives the second session's clock back and
/// the first session's GEMM rate, from a base whose GEMM rate and power plateau are off by 10%.
/// Merging numbers the sessions after the files' order, and a file whose first session has no
/// GEMM to anchor the clock gets no factor at all.
#[test]
fn calib_fit_recovers_a_later_sessions_clock() {
    use metp_sim::fitting::kernel_fit::fit_profile;
    use metp_sim::fitting::kernel_fit::predicted_s;
    use metp_sim::fitting::measurements::KernelMeasurements;
    use metp_sim::fitting::measurements::{GemmSample, Sample, Timing as FileTiming};
    use metp_sim::fitting::sessions::session_hardware;
    use metp_sim::schedule::KernelShape;

    let truth = load_hardware("hgx-h200").unwrap();
    let clock = 0.85;
    let slow = session_hardware(&truth, clock);
    let time = |hw: &metp_sim::config::Hardware, (m, n, k): (u64, u64, u64)| {
        let s = Sample {
            shape: KernelShape::gemm(m, n, k),
            measured_s: 1.0,
            session: 0,
        };
        predicted_s(hw, FileTiming::Isolated, &s)
    };
    let sample = |hw, session: Option<u32>, mnk: (u64, u64, u64)| GemmSample {
        m: mnk.0,
        n: mnk.1,
        k: mnk.2,
        flops: None,
        s: time(hw, mnk),
        session,
    };
    let squares: Vec<(u64, u64, u64)> = [1024u64, 2048, 4096, 8192, 16384]
        .iter()
        .map(|&n| (n, n, n))
        .collect();
    let mut skinny = Vec::new();
    for m in [512u64, 2048, 8192, 32768] {
        for (n, k) in [
            (12288u64, 4096u64),
            (4096, 4096),
            (22016, 4096),
            (4096, 11008),
        ] {
            skinny.push((m, n, k));
        }
    }
    let file = |gemm: Vec<GemmSample>| KernelMeasurements {
        sm_count: Some(132),
        gemm,
        ..KernelMeasurements::empty("synthetic", "2026-12-01", "NVIDIA H200", "test")
    };
    let first = file(squares.iter().map(|&g| sample(&truth, None, g)).collect());
    let second = file(
        skinny
            .iter()
            .chain(&squares)
            .map(|&g| sample(&slow, None, g))
            .collect(),
    );
    let merged = KernelMeasurements::merge(&[first.clone(), second]).unwrap();
    assert_eq!(merged.gemm_sessions(), 2);
    assert!(merged.gemm[..squares.len()]
        .iter()
        .all(|g| g.session.is_none()));
    assert!(merged.gemm[squares.len()..]
        .iter()
        .all(|g| g.session == Some(1)));
    // A third file joins as session 2.
    let three = KernelMeasurements::merge(&[merged.clone(), first.clone()]).unwrap();
    assert_eq!(three.gemm.last().unwrap().session, Some(2));

    let mut base = truth.clone();
    base.kernels.gemm.mma_fraction.value *= 0.9;
    if let Some(p) = base.kernels.gemm.power_fraction.as_mut() {
        p.value *= 0.9;
    }
    let fit = fit_profile(&merged, &base, &|w| format!("test: {w}")).unwrap();
    assert_eq!(fit.sessions.len(), 1);
    let got = fit.sessions[0].rate_factor;
    assert!(close(got, clock, 2e-3), "session clock {got} vs {clock}");
    assert!(!fit.sessions[0].at_edge);
    let (f, t) = (&fit.profile.kernels.gemm, &truth.kernels.gemm);
    assert!(
        close(f.mma_fraction.value, t.mma_fraction.value, 1e-2),
        "mma_fraction {} vs {}",
        f.mma_fraction.value,
        t.mma_fraction.value
    );
    assert!(
        f.mma_fraction.source.contains("session 1 ×0.85"),
        "{}",
        f.mma_fraction.source
    );
    let gemm = fit.errors.iter().find(|e| e.kind.name() == "gemm").unwrap();
    assert!(gemm.max_abs_error < 1e-2, "{gemm:?}");

    // No GEMM of the first session: nothing anchors the clock, so there is no factor.
    let mut unanchored = merged.clone();
    unanchored.gemm.retain(|g| g.session.is_some());
    let fit = fit_profile(&unanchored, &base, &|w| format!("test: {w}")).unwrap();
    assert!(fit.sessions.is_empty());
}
