//! The kernel fit from measurement files: latency-bound samples leave a bandwidth at its range's
//! edge, valid and said to be undetermined, and GEMMs from a later session give its clock back.

use std::path::Path;

use metp_sim::config::load_hardware;

use super::calib::close;

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
