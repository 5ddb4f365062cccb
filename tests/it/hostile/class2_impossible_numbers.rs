//! Class 2 — impossible numbers reported as results: a saturated picosecond clock (18,446,744 s
//! with MFU 3939%), MFU 2.9e306 and a `null` time from a tiny FLOP rate, `inf` in `sweep.csv`,
//! MFU 1153% from a wrapped layer count. No output may carry an MFU above 1, a NaN or an
//! infinity, or a step time the clock cannot represent: such inputs are refused.

use metp_sim::config::{load_hardware, load_model, MethodId};
use metp_sim::evaluate::{Evaluation, Metrics, SimulateOptions};
use metp_sim::schedule::StepTimes;
use metp_sim::sim::LinkModel;

use super::{bundled, refuses, succeeds, workload_p8, write};

#[test]
fn a_step_beyond_the_clock_is_refused_not_saturated() {
    // The closed form already puts a 1G-token step beyond 2^62 ps: refused before simulating.
    let e = refuses(&["simulate", "--seq", "1g"], 1);
    assert!(e.contains("2^62 ps"), "{e}");
}

#[test]
fn rates_outside_the_physical_range_are_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let mut hw = bundled("hardware-profiles", "dgx-a100-80gb");
    hw["gpu"]["peak_bf16_flops_per_s"]["value"] = 1e-300.into();
    let tiny = write(dir.path(), "tiny.json", &hw);
    let e = refuses(&["simulate", "--hw", &tiny], 1);
    assert!(
        e.contains("gpu.peak_bf16_flops_per_s.value") && e.contains("1e-300"),
        "{e}"
    );
    let e = refuses(
        &[
            "sweep", "--hw", &tiny, "--seq", "4k", "--engine", "analytic",
        ],
        1,
    );
    assert!(e.contains("must be a rate"), "{e}");
    // --scale goes through the same bounds after scaling.
    let e = refuses(&["simulate", "--scale", "flops=1e-300"], 1);
    assert!(e.contains("gpu.peak_bf16_flops_per_s.value"), "{e}");
}

/// A step clock of 0 would make every GEMM of a step take forever, one above 1 would make a
/// step's GEMMs faster than any call was measured: both refused at load, naming the field.
#[test]
fn a_step_clock_outside_zero_to_one_is_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    for bad in [0.0, -0.5, 1.5] {
        let mut hw = bundled("hardware-profiles", "hgx-h200");
        hw["kernels"]["gemm"]["step_clock_fraction"]["value"] = bad.into();
        let f = write(dir.path(), "clock.json", &hw);
        let e = refuses(&["simulate", "--hw", &f], 1);
        assert!(
            e.contains("kernels.gemm.step_clock_fraction.value") && e.contains("(0, 1]"),
            "{bad}: {e}"
        );
    }
}

/// The slowest profile the limits allow (10^6 FLOP/s, 10^6 bytes/s) still gives only finite
/// numbers and MFU ≤ 1 — or a refusal — in every output of a sweep.
#[test]
fn the_slowest_allowed_profile_gives_finite_numbers_or_a_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let mut hw = bundled("hardware-profiles", "dgx-a100-80gb");
    for f in ["peak_bf16_flops_per_s", "hbm_bytes_per_s"] {
        hw["gpu"][f]["value"] = 1e6.into();
    }
    hw["intra_node"]["bytes_per_s_per_direction"]["value"] = 1e6.into();
    let slow = write(dir.path(), "slow.json", &hw);
    let out = dir.path().join("out");
    let out_s = out.to_string_lossy().into_owned();
    succeeds(&[
        "sweep",
        "--hw",
        &slow,
        "--seq",
        "4k,1m",
        "--p",
        "8",
        "--methods",
        "metp,tp",
        "--engine",
        "analytic",
        "--svg-only",
        "--out",
        &out_s,
    ]);
    let csv = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    for bad in ["inf", "NaN", "nan"] {
        assert!(!csv.contains(bad), "{bad} in {csv}");
    }
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("sweep.json")).unwrap()).unwrap();
    for p in json["points"].as_array().unwrap() {
        if let Some(mfu) = p["mfu"].as_f64() {
            assert!((0.0..=1.0).contains(&mfu), "{p}");
        } else {
            assert_ne!(p["status"], "ok", "{p}");
        }
    }
}

/// `Metrics::check` is the last guard of every study: NaN, infinities, a non-positive step,
/// a step beyond the clock and an MFU above 1 are each refused with the number named.
#[test]
fn metrics_refuse_what_cannot_be_reported() {
    let w = workload_p8(
        load_model("llama2-7b").unwrap(),
        load_hardware("dgx-a100-80gb").unwrap(),
        MethodId::Metp,
    );
    let e = Evaluation::new(w.clone());
    assert!(e.check().is_ok());
    let times = |step: f64| StepTimes {
        step_time_s: step,
        compute_s: step,
        communication_s: 0.0,
        exposed_communication_s: 0.0,
    };
    let check = |step: f64| Metrics::new(&w, &times(step), &e.inventory).check("test");
    // 1e-6 s for a 7B step is faster than 8 A100s' peak: MFU far above 1.
    let err = check(1e-6).unwrap_err().to_string();
    assert!(err.contains("MFU") && err.contains("> 1"), "{err}");
    assert!(check(f64::NAN).unwrap_err().to_string().contains("NaN"));
    assert!(check(f64::INFINITY).is_err());
    assert!(check(0.0).is_err());
    assert!(check(1e7).unwrap_err().to_string().contains("2^62 ps"));
    assert!(check(1.0).is_ok());
    // A simulation checks its own metrics too.
    let s = Evaluation::new(w)
        .simulate(SimulateOptions::full(LinkModel::Ideal))
        .unwrap();
    assert!(s.metrics.mfu > 0.0 && s.metrics.mfu <= 1.0);
}

/// A model with 2^32 layers wrapped the FLOP count (MFU 1153%); it is refused at load now, and
/// the largest model allowed counts its FLOPs in floats.
#[test]
fn a_huge_layer_count_is_refused_not_wrapped() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = bundled("models", "llama2-7b");
    m["layers"] = (1u64 << 32).into();
    let path = write(dir.path(), "m.json", &m);
    let e = refuses(&["memory", "--model", &path], 1);
    assert!(e.contains("'layers'") && e.contains("2^20"), "{e}");
}
