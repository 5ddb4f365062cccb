//! Tests of [`super`] (measurements).

#[test]
fn calib_plateau_statement_tells_a_plateau_from_a_ramp() {
    let mut m = KernelMeasurements::read(
        &std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("hardware-profiles/measurements/h200-pytorch-2026-11-30.json"),
    )
    .unwrap();
    // The shared H200 file: 4096³ at 735 and 8192³ at 793 TFLOP/s — 7% apart.
    assert!(m.gemm_plateau(0.10).contains("is the plateau"));
    assert!(m.gemm_plateau(0.05).contains("NOT a plateau"));
    // Only small GEMMs (the 2.7·10⁸-FLOP calls): not a plateau.
    m.gemm.truncate(2);
    assert!(m.gemm_plateau(0.10).contains("too few"));
}

use super::*;

fn shared() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("hardware-profiles/measurements/h200-pytorch-2026-11-30.json")
}

#[test]
fn reads_the_shared_h200_file() {
    let m = KernelMeasurements::read(&shared()).unwrap();
    assert_eq!(m.device, "NVIDIA H200");
    assert_eq!(m.gemm.len(), 4);
    assert_eq!(m.attention.len(), 12);
    assert_eq!(m.copy.len(), 6);
    assert_eq!(m.attention[0].q(), 512);
    assert_eq!(m.attention[0].d(), 128);
    assert!(m.eager_op_s.unwrap() > 5e-6);
}

/// A ring step of 8 ranks is a message like any other; a rank count that cannot hold its
/// sender and receiver is refused, naming the entry.
#[test]
fn ring_steps_of_several_ranks_are_checked() {
    let mut m = KernelMeasurements::empty("t", "2026-12-01", "NVIDIA H200", "torch");
    let step = |from, to, ranks| P2pSample {
        from,
        to,
        bytes: 4 << 20,
        s: 3e-5,
        via: Some("nccl send/recv ring step over 8 ranks".into()),
        ranks,
    };
    m.p2p = vec![step(0, 1, None), step(0, 1, Some(8)), step(7, 0, Some(8))];
    m.validate(Path::new("m.json")).unwrap();
    let back: KernelMeasurements = serde_json::from_str(&m.to_json()).unwrap();
    assert_eq!(back, m);
    for (bad, field, says) in [
        (step(0, 1, Some(1)), "p2p[1].ranks", "between 2 and"),
        (step(0, 8, Some(8)), "p2p[1].ranks", "from rank 0 to rank 8"),
        // A message to itself is refused before its ring is looked at.
        (step(3, 3, Some(8)), "p2p[1]", "to itself"),
        (step(0, 1, Some(u32::MAX)), "p2p[1].ranks", "between 2 and"),
    ] {
        m.p2p = vec![step(0, 1, Some(8)), bad];
        let e = m.validate(Path::new("m.json")).unwrap_err().to_string();
        assert!(e.contains(field) && e.contains(says), "{e}");
    }
}

#[test]
fn round_trips_through_json() {
    let m = KernelMeasurements::read(&shared()).unwrap();
    let back: KernelMeasurements = serde_json::from_str(&m.to_json()).unwrap();
    assert_eq!(back, m);
}
