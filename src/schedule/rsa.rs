//! Ring self-attention (Li et al. 2021, ColossalAI `RingQK` / `RingAV`): on s/p local tokens, K
//! chunks travel the ring to fill the local score rows, then V chunks travel for P·V. The
//! implementation's ring passes are synchronous (one buffer, no overlap) and its kernels are
//! unfused. Backward repeats both rings and all-reduces full-length dK and dV.

use super::common::sequence_split_plan;
use super::kernels::{
    linear_bwd, linear_fwd, norm, norm_bwd, qk_passes, residual_bwd, residual_fwd, Passes,
};
use super::ring::ring_step;
use super::stage::{Axis, Kernel, Ring, Stage, StepPlan};
use super::CollectiveOp;
use crate::config::{Dims, Recompute, ValidWorkload, Workload};

/// A ring of p synchronous steps, each running `block(sq, sk)`'s GEMMs for the chunk it holds
/// (under a causal mask: the diagonal chunk in full, since the scores are masked afterwards,
/// and nothing or half a chunk for the others, as for ring attention).
fn chunk_ring(
    w: &Workload,
    name: &'static str,
    c: f64,
    block: &dyn Fn(f64, f64) -> Vec<Kernel>,
    chunk_bytes: u64,
) -> Ring {
    let step = ring_step(w, c, &|sq, sk, _causal| block(sq, sk), Vec::new());
    Ring {
        name,
        steps: vec![step; w.p as usize],
        prefetch_bytes: chunk_bytes,
        accumulator_bytes: 0,
        buffers: 1,
        axis: Axis::Method,
    }
}

/// The step plan of ring self-attention.
pub fn plan(w: &ValidWorkload) -> StepPlan {
    let d = Dims::<f64>::new(w);
    let c = d.s / d.p;
    let local = d.b * c;
    let kv_w = d.a_kv * d.d;
    let chunk = (2.0 * local * kv_w) as u64;
    let bh = d.b * d.a;
    // One chunk's scores for all heads: QKᵀ (sq × sk per head) or P·V.
    let qk = |sq: f64, sk: f64| vec![Kernel::batched_gemm("qk-block", bh, sq, sk, d.d)];
    let av = |sq: f64, sk: f64| vec![Kernel::batched_gemm("av-block", bh, sq, d.d, sk)];
    let scores = d.b * d.a * c * d.s;
    let px = Passes::of(w);
    let mut pre = norm(px, "ln1", local, d.h);
    pre.push(linear_fwd("qkv", local, d.h + 2.0 * kv_w, d.h));
    pre.extend(qk_passes(px, "rope", local, d.h, kv_w));
    let attn_f = vec![
        Stage::Compute(pre.clone()),
        Stage::Ring(chunk_ring(w, "ring-qk", c, &qk, chunk)),
        Stage::Compute(vec![Kernel::elementwise(
            "softmax",
            scores,
            if w.dropout() { 2.0 } else { 1.0 },
        )]),
        Stage::Ring(chunk_ring(w, "ring-av", c, &av, chunk)),
        Stage::Compute(vec![
            linear_fwd("out-proj", local, d.h, d.h),
            residual_fwd("attn-residual", local, d.h, w.dropout()),
        ]),
    ];
    let full = w.options.recompute == Recompute::Full;
    let mut attn_b = Vec::new();
    if full || w.options.recompute == Recompute::Selective {
        attn_b.extend(attn_f.iter().cloned());
    }
    let mut k = vec![residual_bwd("attn-residual-bwd", local, d.h, w.dropout())];
    k.extend(linear_bwd("out-proj-bwd", local, d.h, d.h));
    attn_b.push(Stage::Compute(k));
    // Backward of P·V (dP = dO·Vᵀ and the local part of dV = Pᵀ·dO) with V chunks traveling,
    // the softmax backward, then QKᵀ's backward (dQ = dS·K and the local part of dK = dSᵀ·Q)
    // with K chunks traveling.
    let av_bwd = |sq: f64, sk: f64| {
        vec![
            Kernel::batched_gemm("av-block-bwd-dp", bh, sq, sk, d.d),
            Kernel::batched_gemm("av-block-bwd-dv", bh, sk, d.d, sq),
        ]
    };
    let qk_bwd = |sq: f64, sk: f64| {
        vec![
            Kernel::batched_gemm("qk-block-bwd-dq", bh, sq, d.d, sk),
            Kernel::batched_gemm("qk-block-bwd-dk", bh, sk, d.d, sq),
        ]
    };
    attn_b.push(Stage::Ring(chunk_ring(w, "ring-av-bwd", c, &av_bwd, chunk)));
    attn_b.push(Stage::Compute(vec![Kernel::elementwise(
        "softmax-bwd",
        scores,
        2.0,
    )]));
    attn_b.push(Stage::Ring(chunk_ring(w, "ring-qk-bwd", c, &qk_bwd, chunk)));
    let full_kv = (2.0 * d.b * d.s * kv_w) as u64;
    for name in ["all-reduce-dk", "all-reduce-dv"] {
        attn_b.push(Stage::Collective {
            name,
            op: CollectiveOp::AllReduce,
            bytes: full_kv,
        });
    }
    let mut k: Vec<Kernel> = qk_passes(px, "rope-bwd", local, d.h, kv_w);
    k.extend(linear_bwd("qkv-bwd", local, d.h + 2.0 * kv_w, d.h));
    k.extend(norm_bwd(px, "ln1-bwd", local, d.h));
    attn_b.push(Stage::Compute(k));

    sequence_split_plan(w, &d, local, attn_f, attn_b)
}
