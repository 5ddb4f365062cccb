//! How memory scales with the degree p: METP's largest transient without FlashAttention is one
//! attention block of b·(a/p)·(s/p)² elements — a slope of −3 on a log-log plot (claim C1) —
//! while TP stores a·s²·b/t attention-score bytes per layer — a slope of −1.

use crate::common::inventory;
use metp_sim::config::{Activation, MethodId, Model, Norm, Options};
use metp_sim::memory::{Kind, Phase};

use crate::common::{no_flash, workload};

/// A model whose heads and widths divide every p up to 64.
fn wide() -> Model {
    Model {
        name: "wide".into(),
        layers: 2,
        hidden: 8192,
        heads: 64,
        kv_heads: 64,
        ffn_hidden: 32768,
        vocab: 51200,
        activation: Activation::Gelu,
        norm: Norm::Layernorm,
        dropout: false,
        tied_embeddings: true,
        biases: Default::default(),
        sliding_window: None,
        rotary: false,
        source: "test".into(),
    }
}

/// Least-squares slope of ln(y) against ln(x).
fn loglog_slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let (lx, ly): (Vec<f64>, Vec<f64>) = points.iter().map(|&(x, y)| (x.ln(), y.ln())).unzip();
    let mx = lx.iter().sum::<f64>() / n;
    let my = ly.iter().sum::<f64>() / n;
    let cov: f64 = lx.iter().zip(&ly).map(|(x, y)| (x - mx) * (y - my)).sum();
    let var: f64 = lx.iter().map(|x| (x - mx) * (x - mx)).sum();
    cov / var
}

const DEGREES: [u64; 6] = [2, 4, 8, 16, 32, 64];

#[test]
fn metp_largest_transient_without_flash_falls_as_p_to_the_minus_3() {
    let s = 1 << 20;
    let mut largest = Vec::new();
    let mut working_set = Vec::new();
    for p in DEGREES {
        let inv = inventory(&workload(wide(), MethodId::Metp, p, s, no_flash())).unwrap();
        let top = inv
            .tensors
            .iter()
            .filter(|t| t.kind == Kind::Transient)
            .max_by_key(|t| t.bytes())
            .unwrap();
        assert!(
            top.name.starts_with("attn.block_"),
            "p={p}: largest is {}",
            top.name
        );
        largest.push((p as f64, top.bytes() as f64));
        working_set.push((p as f64, inv.transient_bytes(Phase::BwdAttention) as f64));
    }
    let slope = loglog_slope(&largest);
    assert!(
        (slope + 3.0).abs() < 1e-9,
        "largest transient slope {slope}"
    );
    // The whole backward-attention working set also holds O(1/p) buffers; at s = 2^20 the
    // block still dominates it.
    let slope = loglog_slope(&working_set);
    assert!((-3.0..-2.8).contains(&slope), "working-set slope {slope}");
}

#[test]
fn tp_attention_score_memory_falls_as_p_to_the_minus_1() {
    let s = 16384;
    let mut scores = Vec::new();
    for p in DEGREES {
        let inv = inventory(&workload(wide(), MethodId::Tp, p, s, no_flash())).unwrap();
        let bytes: u128 = inv
            .tensors
            .iter()
            .filter(|t| t.kind == Kind::Stored && t.name.starts_with("attn.softmax"))
            .map(|t| t.bytes_each)
            .sum();
        scores.push((p as f64, bytes as f64));
    }
    let slope = loglog_slope(&scores);
    assert!((slope + 1.0).abs() < 1e-9, "TP score slope {slope}");
}

#[test]
fn metp_stores_less_than_every_baseline_with_flash() {
    let s = 65536;
    let metp = inventory(&workload(wide(), MethodId::Metp, 8, s, Options::default()))
        .unwrap()
        .activation_bytes_per_layer;
    for m in [
        MethodId::Tp,
        MethodId::TpSp,
        MethodId::Ulysses,
        MethodId::Ring,
    ] {
        let other = inventory(&workload(wide(), m, 8, s, Options::default()))
            .unwrap()
            .activation_bytes_per_layer;
        assert!(metp < other, "{m}: metp {metp} vs {other}");
    }
}
