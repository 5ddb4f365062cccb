//! METP (DESIGN §1): on s/p local tokens with weights split 1/p.
//!
//! Attention is a two-level loop: an outer loop over G head groups (G = p by default) whose
//! weight shards are fetched for the next group while the current one runs — by a
//! store-and-forward chain along the ring or by an NCCL broadcast from the owner — and, inside
//! it, a K/V ring over the p sequence blocks. The MLP is a one-level ring in which each
//! device's (W1, W2[, W3]) shard travels. Backward fetches the weights again, recomputes QKV
//! (unless stored), runs the rings backward with fp32 gradient accumulators traveling back to
//! their owners (K/V ring: dK/dV; MLP ring: weight gradients; outer loop: reduced to the owner
//! while the next group runs). With vocabulary parallelism the head is a ring over vocabulary
//! shards with an online log-sum-exp.

use super::common::{finish, Parts};
use super::kernels::{
    head as head_kernels, linear_bwd, linear_fwd, mlp_bwd, mlp_fwd, norm, norm_bwd, qk_passes,
    residual_bwd, residual_fwd, Passes,
};
use super::ring::kv_ring;
use super::stage::{Axis, Exchange, Kernel, Outer, Ring, RingStep, Stage, StepPlan};
use crate::config::{Activation, Dims, Recompute, ValidWorkload, WeightExchange, Workload};

fn weight_ring(
    w: &Workload,
    name: &'static str,
    kernels: Vec<Kernel>,
    weight_elems: f64,
    backward: bool,
) -> Ring {
    let steps = (0..w.p)
        .map(|_| RingStep {
            kernels: kernels.clone(),
            causal: None,
            accumulate: if backward {
                vec![Kernel::elementwise("wgrad-accumulate", weight_elems, 2.0)]
            } else {
                Vec::new()
            },
        })
        .collect();
    Ring {
        name,
        steps,
        prefetch_bytes: (2.0 * weight_elems) as u64,
        accumulator_bytes: if backward {
            (4.0 * weight_elems) as u64
        } else {
            0
        },
        buffers: w.options.metp.recv_buffers,
        axis: Axis::Method,
    }
}

/// The step plan of METP.
pub fn plan(w: &ValidWorkload) -> StepPlan {
    let d = Dims::<f64>::new(w);
    let o = &w.options;
    let g = o.metp.head_groups.unwrap_or(w.p) as f64;
    let c = d.s / d.p;
    let local = d.b * c;
    let rb = o.metp.recv_buffers;
    let kv_g = d.kv_per(g);
    let qkv_w = d.h / g + 2.0 * kv_g * d.d; // output columns of W_qkv[g]
    let group_params = d.h * qkv_w + (d.h / g) * d.h; // W_qkv[g] and W_o[g]
    let exchange = match o.metp.weight_exchange {
        WeightExchange::Ring => Exchange::Chain,
        WeightExchange::Broadcast => Exchange::Broadcast,
    };
    let qkv = linear_fwd("qkv", local, qkv_w, d.h);
    // A group's queries and keys rotated after its projection (rotary models), and back.
    let rope_cols = (d.h / g, kv_g * d.d);
    let px = Passes::of(w);
    let rope_f = qk_passes(px, "rope", local, rope_cols.0, rope_cols.1);
    let rope_b = qk_passes(px, "rope-bwd", local, rope_cols.0, rope_cols.1);
    let out = linear_fwd("out-proj", local, d.h, d.h / g);
    let outer_fwd = Outer {
        name: "head-groups",
        groups: g as u32,
        weight_bytes: (2.0 * group_params) as u64,
        grad_bytes: 0,
        exchange,
        buffers: rb,
        body: vec![
            Stage::Compute(std::iter::once(qkv).chain(rope_f.clone()).collect()),
            Stage::Ring(kv_ring(w, &d, c, d.a / g, kv_g, rb, false, Axis::Method)),
            Stage::Compute(vec![out]),
        ],
    };
    let drop = w.dropout();
    let attn_f = vec![
        Stage::Compute(norm(px, "ln1", local, d.h)),
        Stage::Outer(outer_fwd.clone()),
        Stage::Compute(vec![residual_fwd("attn-residual", local, d.h, drop)]),
    ];

    let f_p = d.f / d.p;
    let mats = match w.model.activation {
        Activation::Gelu => 2.0,
        Activation::Swiglu => 3.0,
    };
    let mlp_shard = mats * d.h * f_p;
    let mlp_f = vec![
        Stage::Compute(norm(px, "ln2", local, d.h)),
        Stage::Ring(weight_ring(
            w,
            "mlp-ring",
            mlp_fwd(px, local, d.h, f_p),
            mlp_shard,
            false,
        )),
        Stage::Compute(vec![residual_fwd("mlp-residual", local, d.h, drop)]),
    ];
    let full = o.recompute == Recompute::Full;
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
    let mut k = if o.metp.store_mlp_act {
        Vec::new()
    } else {
        // The activation input X·W1 of each shard is recomputed before its backward.
        vec![linear_fwd("fc1-recompute", local, (mats - 1.0) * f_p, d.h)]
    };
    k.extend(mlp_bwd(px, local, d.h, f_p));
    mlp_b.push(Stage::Ring(weight_ring(
        w,
        "mlp-ring-bwd",
        k,
        mlp_shard,
        true,
    )));
    mlp_b.push(Stage::Compute(norm_bwd(px, "ln2-bwd", local, d.h)));

    let mut body = Vec::new();
    if !o.metp.store_qkv {
        body.push(Stage::Compute(
            std::iter::once(linear_fwd("qkv-recompute", local, qkv_w, d.h))
                .chain(rope_f)
                .collect(),
        ));
    }
    body.push(Stage::Compute(
        linear_bwd("out-proj-bwd", local, d.h, d.h / g).to_vec(),
    ));
    body.push(Stage::Ring(kv_ring(
        w,
        &d,
        c,
        d.a / g,
        kv_g,
        rb,
        true,
        Axis::Method,
    )));
    body.push(Stage::Compute(
        rope_b
            .into_iter()
            .chain(linear_bwd("qkv-bwd", local, qkv_w, d.h))
            .collect(),
    ));
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
    attn_b.push(Stage::Outer(Outer {
        name: "head-groups-bwd",
        grad_bytes: (4.0 * group_params) as u64,
        body,
        ..outer_fwd
    }));
    attn_b.push(Stage::Compute(norm_bwd(px, "ln1-bwd", local, d.h)));

    let head = if o.vocab_parallel {
        let v_p = (d.v / d.p).ceil();
        let fwd = vec![
            linear_fwd("head", local, v_p, d.h),
            super::kernels::cross_entropy(
                "cross-entropy-partial",
                local * v_p,
                w.options.runtime.cross_entropy,
            ),
        ];
        vec![
            Stage::Compute(norm(px, "final-ln", local, d.h)),
            Stage::Ring(weight_ring(w, "vocab-ring", fwd, v_p * d.h, false)),
            Stage::Ring(weight_ring(
                w,
                "vocab-ring-bwd",
                linear_bwd("head-bwd", local, v_p, d.h).to_vec(),
                v_p * d.h,
                true,
            )),
        ]
    } else {
        let mut k = norm(px, "final-ln", local, d.h);
        k.extend(head_kernels(
            local,
            d.v,
            d.h,
            w.options.runtime.cross_entropy,
        ));
        vec![Stage::Compute(k)]
    };
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
