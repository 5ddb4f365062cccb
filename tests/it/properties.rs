//! Properties of every inventory: peak is monotone in s, never wraps for s up to 2^40, and the
//! totals add up.

use crate::common::inventory;
use metp_sim::config::{load_model, MethodId, Options, Recompute, ZeroStage};
use metp_sim::memory::{Kind, Phase};
use proptest::prelude::*;

use crate::common::workload;

const MODELS: &[&str] = &["llama2-7b", "llama2-70b", "gpt3-1.3b", "korthikanti-22b"];

fn options(flash: bool, rec: u8, zero: u8, dropout: bool) -> Options {
    let mut o = Options {
        flash,
        recompute: [Recompute::None, Recompute::Selective, Recompute::Full][rec as usize],
        zero: [
            None,
            Some(ZeroStage::Zero0),
            Some(ZeroStage::Zero1),
            Some(ZeroStage::Zero2),
            Some(ZeroStage::Zero3),
        ][zero as usize],
        ..Options::default()
    };
    o.dropout = Some(dropout);
    o
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 96,
        // A fixed seed keeps CI reproducible.
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x6d65_7470),
        ..ProptestConfig::default()
    })]

    #[test]
    fn peak_is_monotone_in_seq_and_never_wraps(
        model_i in 0..MODELS.len(),
        method_i in 0..6usize,
        p_exp in 0..4u32,
        k1 in 1u64..1 << 20,
        dk in 0u64..1 << 20,
        big in 0u32..=20,
        flash: bool,
        rec in 0u8..3,
        zero in 0u8..5,
        dropout: bool,
    ) {
        let model = load_model(MODELS[model_i]).unwrap();
        let method = MethodId::ALL[method_i];
        let p = 1u64 << p_exp;
        let opts = options(flash, rec, zero, dropout);
        let m = method.seq_multiple(p, &opts);
        // Lengths from a few thousand up to 2^40 tokens.
        let s1 = (k1 << big).min((1u64 << 40) / m) * m;
        let s2 = (s1 + dk * m).min(1u64 << 40) / m * m;
        let a = inventory(&workload(model.clone(), method, p, s1, opts)).unwrap();
        let b = inventory(&workload(model, method, p, s2, opts)).unwrap();
        prop_assert!(a.peak_bytes <= b.peak_bytes, "{} > {}", a.peak_bytes, b.peak_bytes);
        // Far from saturation: u128 arithmetic never came near its limit.
        prop_assert!(b.peak_bytes < u128::MAX >> 16);
        prop_assert!(b.peak_bytes > 0);
    }

    #[test]
    fn totals_add_up(
        model_i in 0..MODELS.len(),
        method_i in 0..6usize,
        p_exp in 0..4u32,
        k in 1u64..64,
        flash: bool,
        rec in 0u8..3,
        zero in 0u8..5,
        dropout: bool,
    ) {
        let model = load_model(MODELS[model_i]).unwrap();
        let method = MethodId::ALL[method_i];
        let p = 1u64 << p_exp;
        let opts = options(flash, rec, zero, dropout);
        let s = k * 1024 * method.seq_multiple(p, &opts);
        let inv = inventory(&workload(model, method, p, s, opts)).unwrap();
        let sum = |kind| inv.tensors.iter().filter(|t| t.kind == kind).map(|t| t.bytes()).sum::<u128>();
        prop_assert_eq!(sum(Kind::Static), inv.static_bytes);
        prop_assert_eq!(sum(Kind::Stored), inv.stored_bytes);
        let max_phase = Phase::ALL.iter().map(|&ph| inv.transient_bytes(ph)).max().unwrap();
        prop_assert_eq!(max_phase, inv.transient_peak_bytes);
        prop_assert_eq!(
            inv.peak_bytes,
            inv.static_bytes + inv.stored_bytes + inv.transient_peak_bytes + inv.reserved_bytes
        );
        prop_assert_eq!(inv.fits, inv.peak_bytes <= inv.capacity_bytes);
        // Nothing is "replicated" on a single device, and every transient has a phase.
        for t in &inv.tensors {
            prop_assert!(!(p == 1 && t.replicated), "{} replicated at p = 1", t.name);
            prop_assert_eq!(t.kind == Kind::Transient, !t.phases.is_empty(), "{}", t.name);
        }
    }
}
