//! GPU checks of the CUDA backend: built only with `--features cuda`, and each test first
//! probes for a driver and a device — without one it prints why it skipped and passes.
//! `scripts/gpu-check.sh` runs them on a GPU machine.
#![cfg(feature = "cuda")]

use metp_sim::calibrate::cuda::{open, probe};
use metp_sim::calibrate::{Backend, GemmShape};
use metp_sim::exec::{ExecMethod, RunSpec, Shape, Unit};

/// The backend, or `None` after printing why the test is skipped.
fn backend(p: usize) -> Option<Box<dyn Backend>> {
    match probe() {
        Ok(found) => eprintln!("cuda: {found}"),
        Err(e) => {
            eprintln!("skipped: no usable GPU here ({e})");
            return None;
        }
    }
    Some(open(p, true).expect("the probe passed, so the backend opens"))
}

#[test]
fn gpu_kernels_time_positive_and_scale_with_size() {
    let Some(mut b) = backend(2) else { return };
    let small = b.gemm_s(GemmShape::new(256, 256, 256)).unwrap();
    let large = b.gemm_s(GemmShape::new(4096, 4096, 4096)).unwrap();
    assert!(small > 0.0 && large > small, "{small} {large}");
    let flops = GemmShape::new(4096, 4096, 4096).flops() / large;
    eprintln!("bf16 GEMM 4096³: {:.1} TFLOP/s", flops / 1e12);
    assert!(b.elementwise_s(1 << 26).unwrap() > 0.0);
    assert!(b.copy_s(1 << 26).unwrap() > 0.0);
    let t1 = b.transfer_s(1 << 20).unwrap();
    let t2 = b.transfer_s(1 << 26).unwrap();
    assert!(t2 > t1, "{t1} {t2}");
}

#[test]
fn gpu_units_match_the_reference_in_bf16() {
    let Some(mut b) = backend(2) else { return };
    let sh = Shape {
        b: 1,
        s: 512,
        h: 256,
        a: 4,
        f: 1024,
        p: 2,
    };
    for unit in [Unit::Attention, Unit::Mlp] {
        for method in [ExecMethod::Metp, ExecMethod::Tp] {
            for causal in [false, true] {
                if unit == Unit::Mlp && causal {
                    continue;
                }
                let mut spec = RunSpec::new(unit, method, sh);
                spec.causal = causal;
                let r = b.run_unit(&spec).unwrap();
                eprintln!(
                    "{unit:?} {method:?} causal {causal}: error {:.2e}, {:.3e} s, {} bytes",
                    r.max_rel_error, r.measured_time_s, r.measured_peak_bytes
                );
                // bf16 operands and outputs: about 3 significant digits.
                assert!(
                    r.max_rel_error < 2e-2,
                    "{unit:?} {method:?}: {}",
                    r.max_rel_error
                );
                assert!(r.measured_time_s > 0.0);
            }
        }
    }
}
