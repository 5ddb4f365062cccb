//! Ring self-attention (Li et al. 2021, ColossalAI `RingQK` / `RingAV`): on s/p local tokens, K
//! chunks travel the ring to fill the local score rows, then V chunks travel for P·V. The
//! implementation's ring passes are synchronous (one buffer, no overlap) and its kernels are
//! unfused. Backward repeats both rings and all-reduces full-length dK and dV.

use super::common::sequence_split_plan;
use super::kernels::{linear_bwd, linear_fwd, norm};
use super::ring::fractions;
use super::stage::{Kernel, Ring, RingStep, Stage, StepPlan};
use super::CollectiveOp;
use crate::config::{Dims, Recompute, Workload};

fn chunk_ring(w: &Workload, name: &'static str, gemm: Kernel, chunk_bytes: u64) -> Ring {
    Ring {
        name,
        steps: (0..w.p as usize)
            .map(|k| RingStep {
                kernels: vec![gemm],
                fraction: fractions(w, k),
                accumulate: Vec::new(),
            })
            .collect(),
        prefetch_bytes: chunk_bytes,
        accumulator_bytes: 0,
        buffers: 1,
    }
}

/// The step plan of ring self-attention.
pub fn plan(w: &Workload) -> StepPlan {
    let d = Dims::<f64>::new(w);
    let c = d.s / d.p;
    let local = d.b * c;
    let _act = w.model.activation;
    let kv_w = d.a_kv * d.d;
    let chunk = (2.0 * local * kv_w) as u64;
    // One (c × c) score block for all heads: QKᵀ or P·V, 2·b·c·c·h FLOPs.
    let block_gemm = |name| Kernel {
        name,
        op: super::OpKind::Gemm,
        flops: 2.0 * d.b * c * c * d.h,
        bytes: 2.0 * (2.0 * local * d.h + d.b * d.a * c * c),
    };
    let scores = d.b * d.a * c * d.s;
    let pre = vec![
        norm("ln1", local, d.h),
        linear_fwd("qkv", local, d.h + 2.0 * kv_w, d.h),
    ];
    let attn_f = vec![
        Stage::Compute(pre.clone()),
        Stage::Ring(chunk_ring(w, "ring-qk", block_gemm("qk-block"), chunk)),
        Stage::Compute(vec![Kernel::elementwise(
            "softmax",
            scores,
            if w.dropout() { 2.0 } else { 1.0 },
        )]),
        Stage::Ring(chunk_ring(w, "ring-av", block_gemm("av-block"), chunk)),
        Stage::Compute(vec![linear_fwd("out-proj", local, d.h, d.h)]),
    ];
    let full = w.options.recompute == Recompute::Full;
    let mut attn_b = Vec::new();
    if full || w.options.recompute == Recompute::Selective {
        attn_b.extend(attn_f.iter().cloned());
    }
    attn_b.push(Stage::Compute(
        linear_bwd("out-proj-bwd", local, d.h, d.h).to_vec(),
    ));
    // Backward of P·V (dP and the local part of dV) with V chunks traveling, the softmax
    // backward, then QKᵀ's backward (dQ and the local part of dK) with K chunks traveling.
    let mut two = block_gemm("av-block-bwd");
    two.flops *= 2.0;
    two.bytes *= 2.0;
    attn_b.push(Stage::Ring(chunk_ring(w, "ring-av-bwd", two, chunk)));
    attn_b.push(Stage::Compute(vec![Kernel::elementwise(
        "softmax-bwd",
        scores,
        2.0,
    )]));
    attn_b.push(Stage::Ring(chunk_ring(
        w,
        "ring-qk-bwd",
        Kernel {
            name: "qk-block-bwd",
            ..two
        },
        chunk,
    )));
    let full_kv = (2.0 * d.b * d.s * kv_w) as u64;
    for name in ["all-reduce-dk", "all-reduce-dv"] {
        attn_b.push(Stage::Collective {
            name,
            op: CollectiveOp::AllReduce,
            bytes: full_kv,
        });
    }
    let mut k = linear_bwd("qkv-bwd", local, d.h + 2.0 * kv_w, d.h).to_vec();
    k.push(norm("ln1-bwd", local, d.h));
    attn_b.push(Stage::Compute(k));

    sequence_split_plan(w, &d, local, attn_f, attn_b)
}
