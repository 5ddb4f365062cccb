//! Megatron TP + sequence parallelism (Korthikanti et al. 2022): norms and dropout run on s/p
//! tokens; each block all-gathers its input before the column-parallel GEMM and
//! reduce-scatters after the row-parallel one. Backward all-gathers the output gradient and,
//! as Megatron's implementation does, the block input again for the weight gradient, then
//! reduce-scatters the input gradient: 2 AG + 2 RS forward, 4 AG + 2 RS backward per layer.

use super::common::{attn, finish, recompute_kernels, Parts};
use super::kernels::{
    attention_bwd, attention_fwd, head as head_kernels, linear_bwd, linear_fwd, mlp_bwd, mlp_fwd,
    norm, norm_bwd, residual_bwd, residual_fwd,
};
use super::stage::{Kernel, Stage, StepPlan};
use super::CollectiveOp;
use crate::config::{Dims, Recompute, Workload};

/// The step plan of Megatron TP + SP.
pub fn plan(w: &Workload) -> StepPlan {
    let d = Dims::<f64>::new(w);
    let rows = d.b * d.s;
    let local = rows / d.p;
    let heads = d.a / d.p;
    let kv = d.kv_per(d.p);
    let act = w.model.activation;
    let full_bytes = (2.0 * rows * d.h) as u64;
    let coll = |name, op| Stage::Collective {
        name,
        op,
        bytes: full_bytes,
    };
    let ag = |name| coll(name, CollectiveOp::AllGather);
    let rs = |name| coll(name, CollectiveOp::ReduceScatter);
    let shape = attn(w, d.b, d.s, d.s, heads, kv, d.d);
    let core = attention_fwd(shape, w.options.flash, w.dropout());
    let mut attn_k = vec![linear_fwd("qkv", rows, (heads + 2.0 * kv) * d.d, d.h)];
    attn_k.extend(core.iter().copied());
    attn_k.push(linear_fwd("out-proj", rows, d.h, heads * d.d));
    let mlp_k = mlp_fwd(rows, d.h, d.f / d.p, act);
    let drop = w.dropout();
    let attn_f = vec![
        Stage::Compute(vec![norm("ln1", local, d.h)]),
        ag("all-gather"),
        Stage::Compute(attn_k.clone()),
        rs("reduce-scatter"),
        Stage::Compute(vec![residual_fwd("attn-residual", local, d.h, drop)]),
    ];
    let mlp_f = vec![
        Stage::Compute(vec![norm("ln2", local, d.h)]),
        ag("all-gather"),
        Stage::Compute(mlp_k.clone()),
        rs("reduce-scatter"),
        Stage::Compute(vec![residual_fwd("mlp-residual", local, d.h, drop)]),
    ];
    let full = w.options.recompute == Recompute::Full;
    let mut mlp_b = Vec::new();
    if full {
        mlp_b.extend(mlp_f.iter().cloned());
    }
    mlp_b.push(Stage::Compute(vec![residual_bwd(
        "mlp-residual-bwd",
        local,
        d.h,
        drop,
    )]));
    mlp_b.push(ag("all-gather-grad"));
    mlp_b.push(ag("all-gather-input"));
    let mut k = mlp_bwd(rows, d.h, d.f / d.p, act);
    mlp_b.push(Stage::Compute(std::mem::take(&mut k)));
    mlp_b.push(rs("reduce-scatter-grad"));
    mlp_b.push(Stage::Compute(vec![norm_bwd("ln2-bwd", local, d.h)]));

    let mut attn_b = Vec::new();
    if full {
        attn_b.extend(attn_f.iter().cloned());
    }
    attn_b.push(Stage::Compute(vec![residual_bwd(
        "attn-residual-bwd",
        local,
        d.h,
        drop,
    )]));
    attn_b.push(ag("all-gather-grad"));
    attn_b.push(ag("all-gather-input"));
    let re = if full {
        Vec::new()
    } else {
        recompute_kernels(w, &attn_k, &core)
    };
    let mut k: Vec<Kernel> = re;
    k.extend(linear_bwd("out-proj-bwd", rows, d.h, heads * d.d));
    k.extend(attention_bwd(shape, w.options.flash, w.dropout()));
    k.extend(linear_bwd("qkv-bwd", rows, (heads + 2.0 * kv) * d.d, d.h));
    attn_b.push(Stage::Compute(k));
    attn_b.push(rs("reduce-scatter-grad"));
    attn_b.push(Stage::Compute(vec![norm_bwd("ln1-bwd", local, d.h)]));

    let v_local = if w.options.vocab_parallel {
        (d.v / d.p).ceil()
    } else {
        d.v
    };
    let head_k = head_kernels(rows, v_local, d.h);
    let head = vec![
        Stage::Compute(vec![norm("final-ln", local, d.h)]),
        ag("all-gather-head"),
        Stage::Compute(head_k),
        rs("reduce-scatter-head"),
    ];
    finish(
        w,
        local,
        Parts {
            attn_fwd: attn_f,
            mlp_fwd: mlp_f,
            head,
            mlp_bwd: mlp_b,
            attn_bwd: attn_b,
        },
    )
}
