//! Virtual devices: failures stop every device, bytes and messages are counted.

use std::time::{Duration, Instant};

use super::*;
use crate::error::Result;

#[test]
fn exec_device_failure_stops_the_others_quickly() {
    let t0 = Instant::now();
    let r = run_devices(3, None, |dev| {
        if dev.rank == 1 {
            return Err(exec_error("device 1 gave up"));
        }
        let tag = Tag::MlpGrad { t: 0 };
        dev.recv(1, tag, "x", &[(1, 1, Dtype::Fp32)])?;
        Ok(())
    });
    match r {
        Err(e) => assert!(e.to_string().contains("device 1 gave up"), "{e}"),
        Ok(_) => panic!("expected an error"),
    }
    assert!(t0.elapsed() < Duration::from_secs(10));
    let r = run_devices(2, None, |dev| -> Result<()> {
        if dev.rank == 0 {
            panic!("deliberate test panic");
        }
        dev.recv(0, Tag::MlpGrad { t: 0 }, "x", &[(1, 1, Dtype::Fp32)])?;
        Ok(())
    });
    assert!(matches!(r, Err(Error::Execution { .. })));
}

#[test]
fn exec_gemm_tn_matches_gemm_tr() {
    // Both paths: every dimension above nalgebra's threshold of 5, and a small one.
    for (m, n, k) in [(7usize, 9usize, 11usize), (3, 8, 6), (12, 2, 9)] {
        let a = Mat::from_fn(k, m, |i, j| ((i * 7 + j * 3) % 11) as f32 - 5.0);
        let b = Mat::from_fn(k, n, |i, j| ((i * 5 + j * 2) % 7) as f32 - 3.0);
        let c0 = Mat::from_fn(m, n, |i, j| (i + j) as f32);
        let mut want = c0.clone();
        want.gemm_tr(0.5, &a, &b, 2.0);
        let mut got = c0.clone();
        gemm_tn(&mut got, 0.5, &a, &b, 2.0);
        assert!((&got - &want).norm() <= 1e-4 * want.norm(), "{m}x{n}x{k}");
        assert!((tr_mul(&a, &b) - a.tr_mul(&b)).norm() <= 1e-4 * b.norm() * a.norm());
    }
}

#[test]
fn exec_device_counts_bytes_and_unreceived_messages() {
    let (runs, _) = run_devices(2, None, |dev| {
        let a = dev.zeros("a", Dtype::Bf16, 3, 4); // 24 bytes
        let b = dev.zeros("b", Dtype::Fp32, 2, 2); // 16 bytes
        drop(a);
        let c = dev.track("c", Dtype::Bf16, vec![Mat::zeros(2, 2), Mat::zeros(1, 3)]); // 14
        assert_eq!(dev.mem().live(), 30);
        drop((b, c));
        Ok(dev.mem().peak())
    })
    .unwrap();
    for r in &runs {
        assert_eq!(r.output, 40);
        assert_eq!(r.mem.peak_breakdown.get("a"), Some(&24));
        assert_eq!(r.mem.end_live_bytes, 0);
    }
    let r = run_devices(2, None, |dev| {
        if dev.rank == 0 {
            dev.send(
                1,
                Tag::MlpGrad { t: 0 },
                vec![(Mat::zeros(1, 1), Dtype::Bf16)],
            )?;
        }
        Ok(())
    });
    match r {
        Err(e) => assert!(e.to_string().contains("never received"), "{e}"),
        Ok(_) => panic!("an unreceived message must fail the run"),
    }
}
