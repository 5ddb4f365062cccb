//! DeepSpeed-Ulysses (Jacobs et al. 2023): everything runs on s/p local tokens except the
//! attention core, which an all-to-all gives a/p heads over the full sequence; a second
//! all-to-all returns the output. Backward mirrors both. Compute waits for each all-to-all.

use super::common::{attn, recompute_kernels, sequence_split_plan};
use super::kernels::{
    attention_bwd, attention_fwd, linear_bwd, linear_fwd, norm, norm_bwd, qk_passes, residual_bwd,
    residual_fwd, Passes,
};
use super::stage::{Kernel, Stage, StepPlan};
use super::CollectiveOp;
use crate::config::{Dims, Recompute, ValidWorkload};

/// The step plan of DeepSpeed-Ulysses.
pub fn plan(w: &ValidWorkload) -> StepPlan {
    let d = Dims::<f64>::new(w);
    let local = d.b * d.s / d.p;
    let heads = d.a / d.p;
    let kv = d.kv_per(d.p);
    let _act = w.model.activation;
    // Local buffers of the all-to-alls: Q, K, V of the local tokens (K/V replicated to p heads
    // when there are fewer KV heads than devices), then the attention output.
    let qkv_bytes = (2.0 * local * (d.a + 2.0 * kv * d.p) * d.d) as u64;
    let out_bytes = (2.0 * local * d.h) as u64;
    let a2a = |name, bytes| Stage::Collective {
        name,
        op: CollectiveOp::AllToAll,
        bytes,
    };
    let shape = attn(w, d.b, d.s, d.s, heads, kv, d.d);
    let core = attention_fwd(shape, w.options.flash, w.dropout());
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
        a2a("all-to-all-qkv", qkv_bytes),
        Stage::Compute(core.clone()),
        a2a("all-to-all-out", out_bytes),
        Stage::Compute(post.clone()),
    ];
    let full = w.options.recompute == Recompute::Full;

    let mut attn_b = Vec::new();
    if full {
        attn_b.extend(attn_f.iter().cloned());
    }
    let mut k: Vec<Kernel> = vec![residual_bwd("attn-residual-bwd", local, d.h, drop)];
    k.extend(linear_bwd("out-proj-bwd", local, d.h, d.h));
    attn_b.push(Stage::Compute(std::mem::take(&mut k)));
    attn_b.push(a2a("all-to-all-grad-out", out_bytes));
    let mut core_b = if full {
        Vec::new()
    } else {
        recompute_kernels(w, &[], &core)
    };
    core_b.extend(attention_bwd(shape, w.options.flash, w.dropout()));
    attn_b.push(Stage::Compute(core_b));
    attn_b.push(a2a("all-to-all-grad-qkv", qkv_bytes));
    let mut k: Vec<Kernel> = qk_passes(px, "rope-bwd", local, d.h, d.a_kv * d.d);
    k.extend(linear_bwd("qkv-bwd", local, d.h + 2.0 * d.a_kv * d.d, d.h));
    k.extend(norm_bwd(px, "ln1-bwd", local, d.h));
    attn_b.push(Stage::Compute(k));

    sequence_split_plan(w, &d, local, attn_f, attn_b)
}
