//! Megatron TP: heads and MLP columns split 1/p over the full sequence; two all-reduces of the
//! b·s·h activation in forward (after the attention out-projection and after fc2) and two in
//! backward (Shoeybi et al. 2019). Nothing overlaps them: compute waits for each.

use super::common::{attn, finish, recompute_kernels, Parts};
use super::kernels::{
    attention_bwd, attention_fwd, head as head_kernels, linear_bwd, linear_fwd, mlp_bwd, mlp_fwd,
    norm, norm_bwd, qk_passes, residual_bwd, residual_fwd, Passes,
};
use super::stage::{Kernel, Stage, StepPlan};
use super::CollectiveOp;
use crate::config::{Dims, Recompute, ValidWorkload};

/// The step plan of Megatron TP.
pub fn plan(w: &ValidWorkload) -> StepPlan {
    let d = Dims::<f64>::new(w);
    let rows = d.b * d.s;
    let heads = d.a / d.p;
    let kv = d.kv_per(d.p);
    let px = Passes::of(w);
    let shape = attn(w, d.b, d.s, d.s, heads, kv, d.d);
    let core = attention_fwd(shape, w.options.flash, w.dropout());
    let ar = |name| Stage::Collective {
        name,
        op: CollectiveOp::AllReduce,
        bytes: (2.0 * rows * d.h) as u64,
    };
    let mut attn_fwd = norm(px, "ln1", rows, d.h);
    attn_fwd.push(linear_fwd("qkv", rows, (heads + 2.0 * kv) * d.d, d.h));
    attn_fwd.extend(qk_passes(px, "rope", rows, heads * d.d, kv * d.d));
    attn_fwd.extend(core.iter().copied());
    attn_fwd.push(linear_fwd("out-proj", rows, d.h, heads * d.d));
    let mut mlp_f = norm(px, "ln2", rows, d.h);
    mlp_f.extend(mlp_fwd(px, rows, d.h, d.f / d.p));

    let full = w.options.recompute == Recompute::Full;
    let mut mlp_b: Vec<Stage> = Vec::new();
    if full {
        mlp_b.push(Stage::Compute(mlp_f.clone()));
        mlp_b.push(ar("all-reduce-recompute"));
    }
    let drop = w.dropout();
    let mut k = vec![residual_bwd("mlp-residual-bwd", rows, d.h, drop)];
    k.extend(mlp_bwd(px, rows, d.h, d.f / d.p));
    k.extend(norm_bwd(px, "ln2-bwd", rows, d.h));
    mlp_b.push(Stage::Compute(k));
    mlp_b.push(ar("all-reduce"));

    let mut attn_b: Vec<Stage> = Vec::new();
    let re = recompute_kernels(w, &attn_fwd, &core);
    if full {
        attn_b.push(Stage::Compute(re));
        attn_b.push(ar("all-reduce-recompute"));
    } else if !re.is_empty() {
        attn_b.push(Stage::Compute(re));
    }
    let mut k: Vec<Kernel> = vec![residual_bwd("attn-residual-bwd", rows, d.h, drop)];
    k.extend(linear_bwd("out-proj-bwd", rows, d.h, heads * d.d));
    k.extend(attention_bwd(shape, w.options.flash, w.dropout()));
    k.extend(qk_passes(px, "rope-bwd", rows, heads * d.d, kv * d.d));
    k.extend(linear_bwd("qkv-bwd", rows, (heads + 2.0 * kv) * d.d, d.h));
    k.extend(norm_bwd(px, "ln1-bwd", rows, d.h));
    attn_b.push(Stage::Compute(k));
    attn_b.push(ar("all-reduce"));

    let v_local = if w.options.vocab_parallel {
        (d.v / d.p).ceil()
    } else {
        d.v
    };
    let mut head_k = norm(px, "final-ln", rows, d.h);
    head_k.extend(head_kernels(
        rows,
        v_local,
        d.h,
        w.options.runtime.cross_entropy,
    ));
    let mut head = vec![Stage::Compute(head_k)];
    if w.options.vocab_parallel {
        head.push(ar("all-reduce-head"));
    }

    finish(
        w,
        rows,
        Parts {
            attn_fwd: vec![
                Stage::Compute(attn_fwd),
                ar("all-reduce"),
                Stage::Compute(vec![residual_fwd("attn-residual", rows, d.h, drop)]),
            ],
            mlp_fwd: vec![
                Stage::Compute(mlp_f),
                ar("all-reduce"),
                Stage::Compute(vec![residual_fwd("mlp-residual", rows, d.h, drop)]),
            ],
            head,
            mlp_bwd: mlp_b,
            attn_bwd: attn_b,
        },
    )
}
