//! Per-layer activation bytes against Korthikanti et al. 2022 (arXiv 2205.05198), Table 2, and
//! the tensor breakdown behind it (shared/research/formulas.md §1.1–1.2).
//!
//! With 2-byte activations and 1-byte dropout masks, a GPT layer stores
//!   attention 11sbh + 5as²b  (QKV input 2, Q and K 4, V 2, out-projection input 2, mask 1;
//!                             softmax output 2as²b, its dropout mask as²b, dropout output 2as²b)
//!   MLP       19sbh          (fc1 input 2, GeLU input 8, fc2 input 8, mask 1)
//!   norms      4sbh          (two LayerNorm inputs)
//! = sbh(34 + 5as/h). Tensor parallelism of degree t keeps the 10sbh of layer-boundary tensors
//! replicated and splits the rest: sbh(10 + 24/t + 5as/(ht)). Sequence parallelism splits the
//! boundary tensors too: (sbh/t)(34 + 5as/h). Selective recomputation removes the 5as²b term;
//! full recomputation keeps only the layer input, 2sbh (2sbh/t when sequence-parallel).

use crate::common::inventory;
use metp_sim::config::{MethodId, Options, Recompute};

use crate::common::{gpt, no_flash, workload};

/// (s, h, a, t) grid: Korthikanti's 22B and 175B layers at their s = 2048, and other shapes.
const CASES: &[(u64, u64, u64, u64)] = &[
    (2048, 6144, 64, 8),
    (2048, 12288, 96, 8),
    (4096, 4096, 32, 4),
    (8192, 2048, 16, 2),
    (16384, 5120, 40, 8),
    (1024, 1024, 16, 16),
];

fn per_layer(method: MethodId, s: u64, h: u64, a: u64, t: u64, options: Options) -> u128 {
    let w = workload(gpt(h, a, 2), method, t, s, options);
    inventory(&w)
        .expect("valid workload")
        .activation_bytes_per_layer
}

fn recompute(r: Recompute) -> Options {
    Options {
        recompute: r,
        ..no_flash()
    }
}

#[test]
fn no_parallelism_is_sbh_34_plus_5as_over_h() {
    for &(s, h, a, _) in CASES {
        let (s2, h2, a2) = (s as u128, h as u128, a as u128);
        // sbh(34 + 5as/h) = 34sbh + 5as²b, b = 1.
        let expected = 34 * s2 * h2 + 5 * a2 * s2 * s2;
        for m in [
            MethodId::Tp,
            MethodId::TpSp,
            MethodId::Ulysses,
            MethodId::Rsa,
        ] {
            assert_eq!(
                per_layer(m, s, h, a, 1, no_flash()),
                expected,
                "{m} s={s} h={h}"
            );
        }
    }
}

#[test]
fn tensor_parallel_is_sbh_10_plus_24_over_t_plus_5as_over_ht() {
    for &(s, h, a, t) in CASES {
        let (s2, h2, a2, t2) = (s as u128, h as u128, a as u128, t as u128);
        let expected = 10 * s2 * h2 + 24 * s2 * h2 / t2 + 5 * a2 * s2 * s2 / t2;
        assert_eq!(
            per_layer(MethodId::Tp, s, h, a, t, no_flash()),
            expected,
            "s={s} h={h} t={t}"
        );
    }
}

#[test]
fn tensor_plus_sequence_parallel_is_sbh_over_t_times_34_plus_5as_over_h() {
    for &(s, h, a, t) in CASES {
        let (s2, h2, a2, t2) = (s as u128, h as u128, a as u128, t as u128);
        let expected = (34 * s2 * h2 + 5 * a2 * s2 * s2) / t2;
        assert_eq!(per_layer(MethodId::TpSp, s, h, a, t, no_flash()), expected);
        // Ulysses and ring self-attention store the same tensors, split the same way.
        assert_eq!(
            per_layer(MethodId::Ulysses, s, h, a, t, no_flash()),
            expected
        );
        assert_eq!(per_layer(MethodId::Rsa, s, h, a, t, no_flash()), expected);
    }
}

#[test]
fn selective_recompute_drops_the_5as_over_h_term() {
    for &(s, h, a, t) in CASES {
        let (s2, h2, t2) = (s as u128, h as u128, t as u128);
        // TP + selective: sbh(10 + 24/t); TP + SP + selective: 34sbh/t.
        assert_eq!(
            per_layer(MethodId::Tp, s, h, a, t, recompute(Recompute::Selective)),
            10 * s2 * h2 + 24 * s2 * h2 / t2
        );
        assert_eq!(
            per_layer(MethodId::TpSp, s, h, a, t, recompute(Recompute::Selective)),
            34 * s2 * h2 / t2
        );
    }
}

#[test]
fn full_recompute_keeps_only_the_layer_input() {
    for &(s, h, a, t) in CASES {
        let (s2, h2, t2) = (s as u128, h as u128, t as u128);
        // The layer input is replicated under TP (2sbh) and split under TP + SP (2sbh/t).
        assert_eq!(
            per_layer(MethodId::Tp, s, h, a, t, recompute(Recompute::Full)),
            2 * s2 * h2
        );
        assert_eq!(
            per_layer(MethodId::TpSp, s, h, a, t, recompute(Recompute::Full)),
            2 * s2 * h2 / t2
        );
    }
}

#[test]
fn flash_replaces_the_quadratic_term_by_the_fp32_log_sum_exp() {
    // formulas.md §7.1 (derived): TP + flash = sbh(10 + 24/t) + 4abs/t; sequence-split methods
    // (TP + SP, Ulysses, ring attention) = 34sbh/p + 4abs/p.
    for &(s, h, a, t) in CASES {
        let (s2, h2, a2, t2) = (s as u128, h as u128, a as u128, t as u128);
        let flash = Options::default();
        assert_eq!(
            per_layer(MethodId::Tp, s, h, a, t, flash),
            10 * s2 * h2 + 24 * s2 * h2 / t2 + 4 * a2 * s2 / t2
        );
        for m in [MethodId::TpSp, MethodId::Ulysses, MethodId::Ring] {
            assert_eq!(
                per_layer(m, s, h, a, t, flash),
                (34 * s2 * h2 + 4 * a2 * s2) / t2,
                "{m}"
            );
        }
    }
}

#[test]
fn micro_batch_scales_linearly() {
    let mut w = workload(gpt(4096, 32, 2), MethodId::Tp, 4, 4096, no_flash());
    let one = inventory(&w).unwrap().activation_bytes_per_layer;
    w.micro_batch = 3;
    assert_eq!(inventory(&w).unwrap().activation_bytes_per_layer, 3 * one);
}

#[test]
fn metp_stores_10sbh_plus_4abs_over_p_and_12_with_dropout_masks() {
    // DESIGN §1: X_i (layer input), attention input, all O[i,g], second norm input and MLP input
    // at 2bsh/p each = 10sbh/p, plus the fp32 log-sum-exp 4abs/p; two 1-byte output dropout
    // masks add 2sbh/p. Independent of flash: METP never stores a score block.
    for &(s, h, a, t) in CASES {
        let (s2, h2, a2, t2) = (s as u128, h as u128, a as u128, t as u128);
        for flash in [true, false] {
            let mut opts = Options {
                flash,
                ..Options::default()
            };
            opts.dropout = Some(false);
            assert_eq!(
                per_layer(MethodId::Metp, s, h, a, t, opts),
                (10 * s2 * h2 + 4 * a2 * s2) / t2
            );
            opts.dropout = Some(true);
            assert_eq!(
                per_layer(MethodId::Metp, s, h, a, t, opts),
                (12 * s2 * h2 + 4 * a2 * s2) / t2
            );
        }
    }
}

/// Step time of the 22B model in Korthikanti et al.'s published setting (Table 5, reproduced by
/// Calculon's validation: `calculon/megatron/validation.py`, `validation/22B_{seqsel,full}.json`):
/// 8 A100-80GB (one DGX), TP 8, micro-batch 4, global batch 4, s = 2048, no FlashAttention
/// (Megatron's fused softmax), GPT layer with dropout. Measured: 1.10 s with TP + SP and
/// selective recomputation, 1.42 s with TP and full recomputation. The bundled
/// `dgx-a100-80gb` profile is fitted to published A100 figures only
/// (`hardware-profiles/measurements/a100-sxm-published.json`); nothing in it is tuned to these
/// two times. The simulator (max-min links) and the analytic model must both land within 5%.
#[test]
fn the_22b_step_lands_within_five_percent_of_the_published_times() {
    use metp_sim::config::{load_hardware, load_model};
    use metp_sim::evaluate::{Evaluation, SimulateOptions};
    use metp_sim::sim::LinkModel;
    for (method, recompute, published_s) in [
        (MethodId::TpSp, Recompute::Selective, 1.10),
        (MethodId::Tp, Recompute::Full, 1.42),
    ] {
        let w = metp_sim::config::Workload {
            model: load_model("korthikanti-22b").unwrap(),
            hardware: load_hardware("dgx-a100-80gb").unwrap(),
            method,
            p: 8,
            dp: 1,
            outer: metp_sim::config::OuterAxes::default(),
            seq: 2048,
            micro_batch: 4,
            micro_batches: 1,
            options: Options {
                recompute,
                ..no_flash()
            },
        };
        let e = Evaluation::new(w.validate().unwrap())
            .simulate(SimulateOptions::full(LinkModel::MaxMin))
            .unwrap();
        let simulated = e.simulation.as_ref().unwrap().times.step_time_s;
        let analytic = e.estimate.step_time_s;
        for (what, t) in [("simulated", simulated), ("analytic", analytic)] {
            let err = t / published_s - 1.0;
            eprintln!(
                "{method} {recompute:?}: {what} {t:.3} s vs {published_s} s ({:+.1}%)",
                100.0 * err
            );
            assert!(
                err.abs() <= 0.05,
                "{method} {recompute:?} {what}: {t} s vs {published_s} s"
            );
        }
    }
}
