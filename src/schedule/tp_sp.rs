//! Megatron TP + sequence parallelism (Korthikanti et al. 2022): norms and dropout run on s/p
//! tokens; each block all-gathers its input before the column-parallel GEMM and
//! reduce-scatters after the row-parallel one. Backward all-gathers the output gradient and,
//! as Megatron's implementation does, the block input again for the weight gradient, then
//! reduce-scatters the input gradient: 2 AG + 2 RS forward, 4 AG + 2 RS backward per layer.
//!
//! With context parallelism (Megatron CP, cp > 1) each group of p devices runs all of that on
//! its s/cp tokens, and the attention core becomes a K/V ring across the cp groups (device i
//! of each group with device i of the others) on blocks of s/cp tokens for the group's a/p
//! heads, as ring attention runs it: two receive buffers, fp32 dK/dV travelling back in
//! backward. Selective recomputation re-runs that forward ring before the backward one.
//! LLaMA 3's context parallelism (`CpComm::AllGather`) moves the same blocks over the same
//! cp − 1 hops but all-gathers them before the attention: the ring with one receive buffer, in
//! which each hop waits for the step before it and none hides behind compute.

use super::common::{attn, finish, recompute_kernels, Parts};
use super::kernels::{
    attention_bwd, attention_fwd, head as head_kernels, linear_bwd, linear_fwd, mlp_bwd, mlp_fwd,
    norm, norm_bwd, residual_bwd, residual_fwd,
};
use super::ring::kv_ring;
use super::stage::{Axis, Kernel, Stage, StepPlan};
use super::CollectiveOp;
use crate::config::{CpComm, Dims, Recompute, ValidWorkload};

/// The step plan of Megatron TP + SP (with context parallelism when cp > 1).
pub fn plan(w: &ValidWorkload) -> StepPlan {
    let d = Dims::<f64>::new(w);
    let group_seq = d.s / d.cp;
    let context = w.outer.cp > 1;
    let rows = d.b * group_seq;
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
    let qkv = linear_fwd("qkv", rows, (heads + 2.0 * kv) * d.d, d.h);
    let out_proj = linear_fwd("out-proj", rows, d.h, heads * d.d);
    let mut attn_k = vec![qkv];
    attn_k.extend(core.iter().copied());
    attn_k.push(out_proj);
    // Two receive buffers let a hop overlap the current block; the all-gather exposes them.
    let buffers = match w.options.runtime.cp_comm {
        CpComm::Ring => 2,
        CpComm::AllGather => 1,
    };
    let cp_ring = |backward| {
        Stage::Ring(kv_ring(
            w,
            &d,
            group_seq,
            heads,
            kv,
            buffers,
            backward,
            Axis::Context,
        ))
    };
    // The attention block between the gather and the scatter: one compute stage, or the QKV
    // projection, the context-parallel ring and the out-projection.
    let attn_core_f = if context {
        vec![
            Stage::Compute(vec![qkv]),
            cp_ring(false),
            Stage::Compute(vec![out_proj]),
        ]
    } else {
        vec![Stage::Compute(attn_k.clone())]
    };
    let mlp_k = mlp_fwd(rows, d.h, d.f / d.p, act);
    let drop = w.dropout();
    let mut attn_f = vec![
        Stage::Compute(vec![norm("ln1", local, d.h)]),
        ag("all-gather"),
    ];
    attn_f.extend(attn_core_f);
    attn_f.extend([
        rs("reduce-scatter"),
        Stage::Compute(vec![residual_fwd("attn-residual", local, d.h, drop)]),
    ]);
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
    if context {
        if w.options.recompute == Recompute::Selective {
            attn_b.push(Stage::Compute(vec![qkv]));
            attn_b.push(cp_ring(false));
        }
        attn_b.push(Stage::Compute(
            linear_bwd("out-proj-bwd", rows, d.h, heads * d.d).to_vec(),
        ));
        attn_b.push(cp_ring(true));
        attn_b.push(Stage::Compute(
            linear_bwd("qkv-bwd", rows, (heads + 2.0 * kv) * d.d, d.h).to_vec(),
        ));
    } else {
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
    }
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
