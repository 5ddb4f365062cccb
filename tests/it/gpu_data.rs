//! The committed H200 GPU check (`reports/gpu/nvidia-h200-2026-11-30/`) checked on a CPU: the
//! kernel model fitted to the measurements of one part of each file predicts the held-out part
//! (issue 9: the CUDA backend's own kernels; issue 8: PyTorch's cuBLAS and FlashAttention-2),
//! and the committed unit runs are predicted again from the profile fitted to the CUDA
//! backend's measurements (`calibrate::repredict`).

use std::path::{Path, PathBuf};

use metp_sim::calibrate::repredict::{repredict, repredict_calibration};
use metp_sim::config::{load_hardware, Hardware};
use metp_sim::fitting::kernel_fit::fit_profile;
use metp_sim::fitting::measurements::KernelMeasurements;
use metp_sim::fitting::price::{price, price_at_clocks, read_input, KindErrors, Priced};

const RUN2: &str = "reports/gpu/nvidia-h200-2026-11-30/run2";

fn path(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(p)
}

/// `base` fitted to the measurement file `fit` (as `calibrate --fit` does).
fn fitted(fit: &Path, base: &Hardware) -> Hardware {
    let m = KernelMeasurements::read(fit).unwrap();
    fit_profile(&m, base, &|w| format!("test fit: {w}"))
        .unwrap()
        .profile
}

/// Per kind, the errors of `hw` on the measurement file `held_out`.
fn held_out(hw: &Hardware, held_out: &Path) -> Vec<KindErrors> {
    let (items, timing) = read_input(held_out).unwrap();
    report(&price(hw, &items, timing, true))
}

/// Prints and returns the per-kind errors of a priced file.
fn report(priced: &Priced) -> Vec<KindErrors> {
    for k in &priced.by_kind {
        eprintln!(
            "{}: {} held out, median {:.1}%, largest {:.1}%",
            k.kind.name(),
            k.samples,
            100.0 * k.median_abs_error,
            100.0 * k.max_abs_error
        );
    }
    priced.by_kind.clone()
}

/// Issue 9: the profile fitted to run 2's `measurements-fit.json` (the CUDA backend's cuBLAS
/// GEMMs, its own NVRTC flash kernels, copies and element-wise passes; every 4th entry of each
/// kind held out by `gpu-check split`) predicts `measurements-held-out.json`. Goal: median
/// ≤ 5% and none over 15% per kind. Met for the medians of GEMMs, attention forward and
/// backward and copies; the largest errors are 22–24% (GEMMs of n = 5120 that cuBLAS runs
/// faster than any of the model's tile choices; one-head 256-token attention calls, slower
/// than four-head ones of the same per-block work), and the two held-out element-wise passes
/// are off by 4% and 16% (this backend's scale kernel speeds up with size beyond what a
/// latency plus a bandwidth can follow). The bounds below are those figures, so that a
/// change that makes the model worse fails here; the README reports them.
#[test]
fn cuda_backend_profile_predicts_its_held_out_kernels() {
    let base = load_hardware("hgx-h200").unwrap();
    let hw = fitted(&path(&format!("{RUN2}/measurements-fit.json")), &base);
    let errors = held_out(&hw, &path(&format!("{RUN2}/measurements-held-out.json")));
    assert_eq!(errors.len(), 5);
    for k in &errors {
        let (median, largest) = match k.kind.name() {
            "elementwise" => (0.11, 0.17),
            _ => (0.05, 0.25),
        };
        assert!(
            k.median_abs_error <= median && k.max_abs_error <= largest,
            "{}: median {:.3}, largest {:.3}",
            k.kind.name(),
            k.median_abs_error,
            k.max_abs_error
        );
    }
}

/// Issue 8: the bundled `hgx-h200` profile is fitted to the shared H200 file and run 2's
/// PyTorch file merged, every 4th entry of each kind held out
/// (`hardware-profiles/measurements/h200-2026-11-30-{fit,held-out}.json`); refitting from the
/// fit part reproduces the bundled profile, and it predicts the held-out part. The two files
/// are two measurement sessions whose GEMMs ran at different clocks (test below): the profile
/// is the shared file's clock and run 2's GEMMs are priced at the clock factor the fit gives
/// that session (fitted on the fit part only). Goal: median ≤ 5% and none over 15%. The
/// medians are 3–6%; the largest errors, 25–31%, are small calls whose time is PyTorch's
/// per-call host floor, which varies from call to call by more than that (the same 512-token
/// backward takes 131–325 µs at neighbouring head counts), and GEMMs of n = 5120 that cuBLAS
/// runs with kernels outside the model's tile shapes. The bounds are those figures.
#[test]
fn h200_profile_predicts_pytorchs_held_out_kernels() {
    let bundled = load_hardware("hgx-h200").unwrap();
    let m = KernelMeasurements::read(&path(
        "hardware-profiles/measurements/h200-2026-11-30-fit.json",
    ))
    .unwrap();
    let fit = fit_profile(&m, &bundled, &|w| format!("test fit: {w}")).unwrap();
    for ((name, a), (_, b)) in fit
        .profile
        .kernels
        .figures()
        .iter()
        .zip(bundled.kernels.figures())
    {
        assert!(
            (a.value - b.value).abs() <= 2e-2 * b.value.abs(),
            "{name}: refitted {} vs bundled {}",
            a.value,
            b.value
        );
    }
    assert_eq!(fit.sessions.len(), 1);
    let clock = fit.sessions[0].rate_factor;
    assert!(
        (0.84..=0.90).contains(&clock),
        "run 2's clock factor {clock:.3}"
    );
    let (items, timing) = read_input(&path(
        "hardware-profiles/measurements/h200-2026-11-30-held-out.json",
    ))
    .unwrap();
    let priced: Priced = price_at_clocks(&bundled, &items, timing, true, &[clock]);
    let errors = report(&priced);
    assert_eq!(errors.len(), 5);
    for k in &errors {
        assert!(
            k.median_abs_error <= 0.06 && k.max_abs_error <= 0.31,
            "{}: median {:.3}, largest {:.3}",
            k.kind.name(),
            k.median_abs_error,
            k.max_abs_error
        );
    }
    // Both sessions' held-out GEMMs, each at its own clock, are centred on the prices.
    assert_eq!(priced.by_session.len(), 2);
    for s in &priced.by_session {
        eprintln!(
            "session {}: {} GEMMs at {:.3}x, median error {:+.1}%, |error| {:.1}% / {:.1}%",
            s.session,
            s.samples,
            s.rate_factor,
            100.0 * s.median_error,
            100.0 * s.median_abs_error,
            100.0 * s.max_abs_error
        );
        assert!(
            s.median_error.abs() <= 0.05,
            "session {}: {:+.3}",
            s.session,
            s.median_error
        );
    }
    // At one clock for both (the profile's), run 2's GEMMs are priced ~10% faster than they
    // ran: the sessions' difference, which one profile cannot follow.
    let raw = price(&bundled, &items, timing, true);
    let run2 = raw.by_session.iter().find(|s| s.session == 1).unwrap();
    assert!(run2.median_error < -0.08, "{:+.3}", run2.median_error);
}

/// The profile the units-only GPU check predicts with (`scripts/gpu-check.sh`,
/// `GPU_CHECK_ONLY=units`): `reports/gpu/nvidia-h200-2026-11-30/profile-units.json`, what
/// `calibrate --fit run2/measurements-fit.json --base hgx-h200` writes (checked figure by figure).
fn units_profile() -> Hardware {
    let committed = load_hardware(
        path("reports/gpu/nvidia-h200-2026-11-30/profile-units.json")
            .to_str()
            .unwrap(),
    )
    .unwrap();
    let base = load_hardware("hgx-h200").unwrap();
    let refit = fitted(&path(&format!("{RUN2}/measurements-fit.json")), &base);
    for ((name, a), (_, b)) in committed
        .kernels
        .figures()
        .iter()
        .zip(refit.kernels.figures())
    {
        assert!(
            (a.value - b.value).abs() <= 1e-9 * b.value.abs(),
            "{name}: committed {} vs refitted {}: regenerate profile-units.json",
            a.value,
            b.value
        );
    }
    committed
}

/// Item 4 of the second round: the committed CUDA unit runs of run 2 (METP and TP, attention
/// and MLP, forward and backward, LLaMA-2 7B at s/p = 2048 in `run-*.json` and in
/// `calibrate.json`, METP's LLaMA-2 13B units at s/p = 1024 in `calibrate.json`; 4 virtual
/// devices on one H200), predicted again from the profile fitted to the CUDA backend's
/// measurements (fit part), each within 10% of its measured time. Before: +19.6% to +25.2%
/// (METP and TP MLP), −22% (TP attention): the prediction followed the CPU runtime's program
/// (a copy into the channel per send, an element-wise add per gradient product, a copy and an
/// add per all-reduce step), which the CUDA units do not run.
#[test]
fn committed_cuda_unit_runs_are_predicted_within_ten_percent() {
    let hw = units_profile();
    let mut runs = Vec::new();
    for f in std::fs::read_dir(path(RUN2)).unwrap() {
        let p = f.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        if name.starts_with("run-") && name.ends_with(".json") {
            runs.push(p);
        }
    }
    runs.sort();
    assert_eq!(runs.len(), 4);
    let read = |p: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    let mut all: Vec<_> = runs
        .iter()
        .map(|p| repredict(&read(p), &hw).unwrap())
        .collect();
    all.extend(
        repredict_calibration(&read(&path(&format!("{RUN2}/calibrate.json"))), &hw).unwrap(),
    );
    assert_eq!(all.len(), 10);
    for r in &all {
        eprintln!(
            "{}: predicted {:.4} s, measured {:.4} s ({:+.1}%){}",
            r.name,
            r.predicted_s,
            r.measured_s,
            100.0 * r.rel_error,
            r.phases
                .iter()
                .map(|p| format!(
                    "; {:?} {:+.1}%",
                    p.phase,
                    100.0 * (p.predicted_s / p.measured_s - 1.0)
                ))
                .collect::<String>()
        );
    }
    for r in &all {
        assert!(r.rel_error.abs() <= 0.10, "{}: {:+.3}", r.name, r.rel_error);
    }
}

/// Why the bundled profile cannot meet the ≤ 5% median on the shared file's four square GEMMs
/// and on run 2's PyTorch file at once: the two sessions (same GPU model, same PyTorch,
/// isolated calls timed with CUDA events, median of 10 after 3 warm-ups) timed the very same
/// square GEMMs 15–21% apart from 2048³ up (run 2 slower: 8192³ at ~669 TFLOP/s against
/// ~793; it ran its squares after ~400 other GEMMs, so a hotter, power-capped clock is the
/// likely cause). A profile between them is ~9% off each; the fit follows run 2's 400 GEMMs.
/// The README reports this beside the shared file's GEMM error.
#[test]
fn the_two_h200_sessions_disagree_on_the_same_square_gemms() {
    let read = |p: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(path(p)).unwrap()).unwrap()
    };
    let shared = read("hardware-profiles/measurements/h200-pytorch-2026-11-30.json");
    let run2 = read(&format!("{RUN2}/pytorch-kernels.json"));
    let square = |v: &serde_json::Value, n: u64| -> f64 {
        v["gemm"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["m"] == n && g["n"] == n && g["k"] == n)
            .unwrap()["s"]
            .as_f64()
            .unwrap()
    };
    for n in [2048u64, 4096, 8192] {
        let ratio = square(&run2, n) / square(&shared, n);
        eprintln!("{n}³: run 2 / shared file = {ratio:.3}");
        assert!((1.14..=1.22).contains(&ratio), "{n}³: {ratio:.3}");
    }
}
