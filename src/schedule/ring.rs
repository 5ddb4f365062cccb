//! Ring attention / context parallelism (Liu et al. 2023; Megatron CP): everything on s/p local
//! tokens; the attention core is a ring of p steps in which K/V blocks travel while the current
//! block is computed (two receive buffers). Backward passes K/V again and fp32 dK/dV
//! accumulators that make a final hop back to their owner.

use super::common::{attn, recompute_kernels, sequence_split_plan};
use super::kernels::{
    attention_bwd, attention_fwd, causal_blocks, linear_bwd, linear_fwd, norm, norm_bwd, qk_passes,
    residual_bwd, residual_fwd, AttnShape, Passes,
};
use super::stage::{Axis, Kernel, Ring, RingStep, Stage, StepPlan};
use crate::config::{Dims, Recompute, ValidWorkload, Workload};

/// A ring step's kernels for every block a device can hold: `block(sq, sk, causal)` gives the
/// kernels of `sq` queries against `sk` keys; the full block is `c` × `c`.
pub fn ring_step(
    w: &Workload,
    c: f64,
    block: &dyn Fn(f64, f64, bool) -> Vec<Kernel>,
    accumulate: Vec<Kernel>,
) -> RingStep {
    RingStep {
        kernels: block(c, c, false),
        causal: w
            .options
            .causal
            .then(|| causal_blocks(c, w.options.causal_zigzag, block)),
        accumulate,
    }
}

/// The K/V ring of the attention core, forward or backward, for `heads` query heads and
/// `kv` KV heads on blocks of `c` tokens, over the devices of `axis`.
#[allow(clippy::too_many_arguments)]
pub fn kv_ring(
    w: &Workload,
    d: &Dims<f64>,
    c: f64,
    heads: f64,
    kv: f64,
    buffers: u64,
    backward: bool,
    axis: Axis,
) -> Ring {
    let shape: AttnShape = attn(w, d.b, c, c, heads, kv, d.d);
    let kv_elems = 2.0 * d.b * c * kv * d.d;
    let flash = w.options.flash;
    let block = |sq: f64, sk: f64, causal: bool| {
        let s = shape.with(sq, sk, causal);
        let mut kernels = if backward {
            attention_bwd(s, flash, false)
        } else {
            attention_fwd(s, flash, false)
        };
        // Merging a block into the running output through the log-sum-exp.
        kernels.push(Kernel::elementwise(
            "lse-merge",
            d.b * sq * heads * d.d,
            1.0,
        ));
        kernels
    };
    let accumulate = if backward {
        vec![Kernel::elementwise("dkv-accumulate", kv_elems, 2.0)]
    } else {
        Vec::new()
    };
    let step = ring_step(w, c, &block, accumulate);
    let members = match axis {
        Axis::Method => w.p,
        Axis::Context => w.outer.cp,
    };
    Ring {
        name: if backward { "kv-ring-bwd" } else { "kv-ring" },
        steps: vec![step; members as usize],
        prefetch_bytes: (2.0 * kv_elems) as u64,
        accumulator_bytes: if backward { (4.0 * kv_elems) as u64 } else { 0 },
        buffers,
        axis,
    }
}

/// The step plan of ring attention.
pub fn plan(w: &ValidWorkload) -> StepPlan {
    let d = Dims::<f64>::new(w);
    let c = d.s / d.p;
    let local = d.b * c;
    let px = Passes::of(w);
    let mut pre = norm(px, "ln1", local, d.h);
    pre.push(linear_fwd("qkv", local, d.h + 2.0 * d.a_kv * d.d, d.h));
    pre.extend(qk_passes(px, "rope", local, d.h, d.a_kv * d.d));
    let drop = w.dropout();
    let post = vec![
        linear_fwd("out-proj", local, d.h, d.h),
        residual_fwd("attn-residual", local, d.h, drop),
    ];
    let attn_f = vec![
        Stage::Compute(pre.clone()),
        Stage::Ring(kv_ring(w, &d, c, d.a, d.a_kv, 2, false, Axis::Method)),
        Stage::Compute(post),
    ];
    let full = w.options.recompute == Recompute::Full;
    let mut attn_b = Vec::new();
    if full {
        attn_b.extend(attn_f.iter().cloned());
    } else {
        let re = recompute_kernels(w, &pre, &[]);
        if !re.is_empty() {
            attn_b.push(Stage::Compute(re));
        }
    }
    let mut k = vec![residual_bwd("attn-residual-bwd", local, d.h, drop)];
    k.extend(linear_bwd("out-proj-bwd", local, d.h, d.h));
    attn_b.push(Stage::Compute(k));
    attn_b.push(Stage::Ring(kv_ring(
        w,
        &d,
        c,
        d.a,
        d.a_kv,
        2,
        true,
        Axis::Method,
    )));
    let mut k: Vec<Kernel> = qk_passes(px, "rope-bwd", local, d.h, d.a_kv * d.d);
    k.extend(linear_bwd("qkv-bwd", local, d.h + 2.0 * d.a_kv * d.d, d.h));
    k.extend(norm_bwd(px, "ln1-bwd", local, d.h));
    attn_b.push(Stage::Compute(k));

    sequence_split_plan(w, &d, local, attn_f, attn_b)
}
