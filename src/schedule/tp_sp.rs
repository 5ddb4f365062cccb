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
//!
//! With `--tp-comm-overlap` (Megatron-Core's `tp_comm_overlap`, Transformer Engine's
//! userbuffers) every sequence-parallel all-gather and reduce-scatter of a layer runs under the
//! GEMM next to it instead of before or after it: TE splits the GEMM by tokens into p chunks
//! and passes the chunks of the collective around the p devices while the chunks compute
//! (`ring_exchange`: the QKV and fc1 forward GEMMs with the input's all-gather, the out-proj
//! and fc2 data gradients with the output gradient's all-gather), or splits the GEMM and
//! reduce-scatters each chunk's result as the next computes (`pipeline`: the out-proj and fc2
//! forward GEMMs), or runs the collective beside a whole GEMM (`bulk`: the input's all-gather
//! for the weight gradient beside the data-gradient GEMM, the input gradient's reduce-scatter
//! beside the weight-gradient GEMM). The tool prices each such pair as a double-buffered ring
//! of p steps over the method's devices: step k computes the k-th token chunk of the GEMM
//! while the next chunk of the all-gather arrives (`prefetch_bytes`), or while the partial
//! sums of the reduce-scatter travel (`accumulator_bytes`, added by an element-wise pass), so
//! a pair lasts about max(GEMM, collective) plus one chunk, with the kernels slowed while
//! messages are in flight as any overlap is (σ). A bulk pair is the same ring of the same
//! bytes, but its GEMM is not split: TE launches it whole (its `bulk` userbuffer
//! configurations, e.g. Megatron-Bridge's `userbuffers_*_h100_*` for qkv_dgrad, qkv_wgrad,
//! fc1_dgrad and fc1_wgrad), so each step carries one p-th share of the whole GEMM's time
//! (`Gemm::parts`) rather than a GEMM on p times fewer tokens — whose tiles, and for a weight
//! gradient a k-loop p times shorter, would run slower than the call TE makes. The output
//! head's gather and scatter (Megatron's own layer, not Transformer Engine's) stay exposed.

use super::common::{attn, finish, recompute_kernels, Parts};
use super::kernels::{
    act_fwd, attention_bwd, attention_fwd, head as head_kernels, linear_bwd, linear_fwd, mlp_bwd,
    mlp_fwd, norm, norm_bwd, qk_passes, residual_bwd, residual_fwd, Passes,
};
use super::ring::kv_ring;
use super::stage::{Axis, Kernel, Ring, RingStep, Stage, StepPlan};
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
    let px = Passes::of(w);
    let full_bytes = (2.0 * rows * d.h) as u64;
    let coll = |name, op| Stage::Collective {
        name,
        op,
        bytes: full_bytes,
    };
    let ag = |name| coll(name, CollectiveOp::AllGather);
    let rs = |name| coll(name, CollectiveOp::ReduceScatter);
    let overlap = w.options.tp_comm_overlap && w.p > 1;
    // Transformer Engine's overlap (module docs): `chunk` is the GEMM on one token chunk of p;
    // an all-gather's chunks arrive while the previous chunks compute, a reduce-scatter's
    // partial sums travel while the next chunks compute.
    let chunk_bytes = full_bytes.div_ceil(w.p);
    let overlapped = |name, chunk: Kernel, gather: bool| {
        let accumulate = if gather {
            Vec::new()
        } else {
            vec![Kernel::memory("rs-accumulate", 3.0 * chunk_bytes as f64)]
        };
        Stage::Ring(Ring {
            name,
            steps: (0..w.p)
                .map(|_| RingStep {
                    kernels: vec![chunk],
                    causal: None,
                    accumulate: accumulate.clone(),
                })
                .collect(),
            prefetch_bytes: if gather { chunk_bytes } else { 0 },
            accumulator_bytes: if gather { 0 } else { chunk_bytes },
            buffers: 2,
            axis: Axis::Method,
        })
    };
    let chunk_rows = rows / d.p;
    let shape = attn(w, d.b, d.s, d.s, heads, kv, d.d);
    let core = attention_fwd(shape, w.options.flash, w.dropout());
    let qkv = linear_fwd("qkv", rows, (heads + 2.0 * kv) * d.d, d.h);
    let out_proj = linear_fwd("out-proj", rows, d.h, heads * d.d);
    // The queries and keys rotated after the projection (rotary models), and back before it.
    let rope_f = qk_passes(px, "rope", rows, heads * d.d, kv * d.d);
    let rope_b = qk_passes(px, "rope-bwd", rows, heads * d.d, kv * d.d);
    let qkv_rope: Vec<Kernel> = std::iter::once(qkv).chain(rope_f.clone()).collect();
    let mut attn_k = qkv_rope.clone();
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
    let drop = w.dropout();
    let full = w.options.recompute == Recompute::Full;
    // A block's backward opens with its forward again under full recomputation, then the
    // residual's gradient.
    let bwd_open = |fwd: &[Stage], residual: &'static str| {
        let mut b = if full { fwd.to_vec() } else { Vec::new() };
        b.push(Stage::Compute(vec![residual_bwd(
            residual, local, d.h, drop,
        )]));
        b
    };
    let (attn_f, mlp_f, mlp_b, attn_b) = if overlap {
        // Each collective under the GEMM next to it (module docs); the chunks' shapes are the
        // whole GEMMs' with the tokens divided by p.
        let selective = w.options.recompute == Recompute::Selective;
        let qkv_n = (heads + 2.0 * kv) * d.d;
        let qkv_c = linear_fwd("qkv", chunk_rows, qkv_n, d.h);
        let proj_c = linear_fwd("out-proj", chunk_rows, d.h, heads * d.d);
        let mut attn_f = vec![
            Stage::Compute(norm(px, "ln1", local, d.h)),
            overlapped("qkv-all-gather", qkv_c, true),
        ];
        if !rope_f.is_empty() {
            attn_f.push(Stage::Compute(rope_f));
        }
        if context {
            attn_f.push(cp_ring(false));
        } else {
            attn_f.push(Stage::Compute(core.clone()));
        }
        attn_f.extend([
            overlapped("out-proj-reduce-scatter", proj_c, false),
            Stage::Compute(vec![residual_fwd("attn-residual", local, d.h, drop)]),
        ]);
        // fc1 and fc2 on a chunk (first and last of the MLP's kernels), the activation whole.
        let mlp_c = mlp_fwd(px, chunk_rows, d.h, d.f / d.p);
        let mlp_f = vec![
            Stage::Compute(norm(px, "ln2", local, d.h)),
            overlapped("fc1-all-gather", mlp_c[0], true),
            Stage::Compute(act_fwd(px, rows, d.f / d.p)),
            overlapped("fc2-reduce-scatter", mlp_c[mlp_c.len() - 1], false),
            Stage::Compute(vec![residual_fwd("mlp-residual", local, d.h, drop)]),
        ];
        // MLP backward: the output gradient gathered under fc2's data gradient, the input
        // gathered under fc1's data gradient, the input gradient scattered under fc1's weight
        // gradient.
        // `mlp_bwd`'s order: fc2's data and weight gradients, the activation's backward (one
        // kernel or several), fc1's data and weight gradients.
        // The bulk pairs (fc1's and, below, the QKV projection's data and weight gradients)
        // carry shares of their whole GEMMs (module docs).
        let bulk = |k: Kernel| k.share(w.p);
        let mlp_whole = mlp_bwd(px, rows, d.h, d.f / d.p);
        let mlp_chunk = mlp_bwd(px, chunk_rows, d.h, d.f / d.p);
        let n = mlp_chunk.len();
        let mut mlp_b = bwd_open(&mlp_f, "mlp-residual-bwd");
        mlp_b.extend([
            overlapped("fc2-dgrad-all-gather", mlp_chunk[0], true),
            Stage::Compute(mlp_whole[1..n - 2].to_vec()),
            overlapped("fc1-dgrad-all-gather-input", bulk(mlp_whole[n - 2]), true),
            overlapped("fc1-wgrad-reduce-scatter", bulk(mlp_whole[n - 1]), false),
            Stage::Compute(norm_bwd(px, "ln2-bwd", local, d.h)),
        ]);
        // Attention backward, the same way around the out-projection and the QKV projection.
        let proj_whole = linear_bwd("out-proj-bwd", rows, d.h, heads * d.d);
        let proj_chunk = linear_bwd("out-proj-bwd", chunk_rows, d.h, heads * d.d);
        let qkv_whole = linear_bwd("qkv-bwd", rows, qkv_n, d.h);
        let mut attn_b = bwd_open(&attn_f, "attn-residual-bwd");
        // Selective recomputation with context parallelism re-runs the QKV projection, which
        // needs the gathered input before any data gradient can hide its gather.
        let input_gathered_early = context && selective;
        if input_gathered_early {
            attn_b.extend([
                ag("all-gather-input"),
                Stage::Compute(qkv_rope.clone()),
                cp_ring(false),
            ]);
        } else if !full && selective {
            attn_b.push(Stage::Compute(core.clone()));
        }
        attn_b.extend([
            overlapped("out-proj-dgrad-all-gather", proj_chunk[0], true),
            Stage::Compute(vec![proj_whole[1]]),
        ]);
        if context {
            attn_b.push(cp_ring(true));
        } else {
            attn_b.push(Stage::Compute(attention_bwd(
                shape,
                w.options.flash,
                w.dropout(),
            )));
        }
        if !rope_b.is_empty() {
            attn_b.push(Stage::Compute(rope_b));
        }
        if input_gathered_early {
            attn_b.push(Stage::Compute(vec![qkv_whole[0]]));
        } else {
            attn_b.push(overlapped(
                "qkv-dgrad-all-gather-input",
                bulk(qkv_whole[0]),
                true,
            ));
        }
        attn_b.extend([
            overlapped("qkv-wgrad-reduce-scatter", bulk(qkv_whole[1]), false),
            Stage::Compute(norm_bwd(px, "ln1-bwd", local, d.h)),
        ]);
        (attn_f, mlp_f, mlp_b, attn_b)
    } else {
        let attn_core_f = if context {
            vec![
                Stage::Compute(qkv_rope.clone()),
                cp_ring(false),
                Stage::Compute(vec![out_proj]),
            ]
        } else {
            vec![Stage::Compute(attn_k.clone())]
        };
        let mlp_k = mlp_fwd(px, rows, d.h, d.f / d.p);
        let mut attn_f = vec![
            Stage::Compute(norm(px, "ln1", local, d.h)),
            ag("all-gather"),
        ];
        attn_f.extend(attn_core_f);
        attn_f.extend([
            rs("reduce-scatter"),
            Stage::Compute(vec![residual_fwd("attn-residual", local, d.h, drop)]),
        ]);
        let mlp_f = vec![
            Stage::Compute(norm(px, "ln2", local, d.h)),
            ag("all-gather"),
            Stage::Compute(mlp_k.clone()),
            rs("reduce-scatter"),
            Stage::Compute(vec![residual_fwd("mlp-residual", local, d.h, drop)]),
        ];
        let mut mlp_b = bwd_open(&mlp_f, "mlp-residual-bwd");
        mlp_b.push(ag("all-gather-grad"));
        mlp_b.push(ag("all-gather-input"));
        let mut k = mlp_bwd(px, rows, d.h, d.f / d.p);
        mlp_b.push(Stage::Compute(std::mem::take(&mut k)));
        mlp_b.push(rs("reduce-scatter-grad"));
        mlp_b.push(Stage::Compute(norm_bwd(px, "ln2-bwd", local, d.h)));

        let mut attn_b = bwd_open(&attn_f, "attn-residual-bwd");
        attn_b.push(ag("all-gather-grad"));
        attn_b.push(ag("all-gather-input"));
        if context {
            if w.options.recompute == Recompute::Selective {
                attn_b.push(Stage::Compute(qkv_rope.clone()));
                attn_b.push(cp_ring(false));
            }
            attn_b.push(Stage::Compute(
                linear_bwd("out-proj-bwd", rows, d.h, heads * d.d).to_vec(),
            ));
            attn_b.push(cp_ring(true));
            attn_b.push(Stage::Compute(
                rope_b
                    .into_iter()
                    .chain(linear_bwd("qkv-bwd", rows, (heads + 2.0 * kv) * d.d, d.h))
                    .collect(),
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
            k.extend(rope_b);
            k.extend(linear_bwd("qkv-bwd", rows, (heads + 2.0 * kv) * d.d, d.h));
            attn_b.push(Stage::Compute(k));
        }
        attn_b.push(rs("reduce-scatter-grad"));
        attn_b.push(Stage::Compute(norm_bwd(px, "ln1-bwd", local, d.h)));
        (attn_f, mlp_f, mlp_b, attn_b)
    };

    let v_local = if w.options.vocab_parallel {
        (d.v / d.p).ceil()
    } else {
        d.v
    };
    let head_k = head_kernels(rows, v_local, d.h, w.options.runtime.cross_entropy);
    let head = vec![
        Stage::Compute(norm(px, "final-ln", local, d.h)),
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
