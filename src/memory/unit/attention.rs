//! The attention unit's moments on device i: head groups outer, the K/V ring inner, forward
//! and backward (the module docs of `memory::unit` give sizes and order).

use super::moments::*;
use super::{UnitSpec, Visit};
use crate::memory::layer::prod;
use crate::memory::names;
use crate::memory::{Kind, Phase};
use Kind::{Static, Stored, Transient};

/// Bytes of the attention unit's tensors (see the module docs).
pub(super) struct AttnSizes {
    ws: u128,
    gs: u128,
    x: u128,
    og: u128,
    lg: u128,
    qkv: u128,
    acc: u128,
    kv: u128,
    dkv: u128,
    blk: u128,
    bl: u128,
    ob: u128,
    dog: u128,
    del: u128,
    dq: u128,
    dqkv: u128,
}

impl AttnSizes {
    fn new(spec: &UnitSpec) -> AttnSizes {
        let [b, s, h, a, _, p] = spec.shape.as_u64();
        let (b, s, h, a, p) = (b as u128, s as u128, h as u128, a as u128, p as u128);
        let g = spec.head_groups() as u128;
        let kv_heads = spec.kv_heads as u128;
        let c = s / p;
        let r = b * c;
        let d = h / a;
        let (hg, ag) = (h / g, a / g);
        // Whole K/V heads per group (`UnitSpec::validate` refuses fewer K/V heads than groups).
        let wkv = (kv_heads / g).max(1) * d;
        let q = hg + 2 * wkv;
        let ws = prod(&[2, h, q]).saturating_add(prod(&[2, hg, h]));
        AttnSizes {
            ws,
            gs: ws.saturating_mul(2),
            x: prod(&[2, r, h]),
            og: prod(&[2, r, hg]),
            lg: prod(&[4, r, ag]),
            qkv: prod(&[2, r, q]),
            acc: prod(&[4, r, hg]),
            kv: prod(&[2, 2, r, wkv]),
            dkv: prod(&[2, 4, r, wkv]),
            blk: prod(&[2, b, ag, c, c]),
            bl: prod(&[4, r, ag]),
            ob: prod(&[2, r, hg]),
            dog: prod(&[2, r, hg]),
            del: prod(&[4, r, ag]),
            dq: prod(&[4, r, hg]),
            dqkv: prod(&[2, r, q]),
        }
    }
}

pub(super) fn attention(spec: &UnitSpec, i: u64, visit: Visit, sink: &mut dyn Sink) {
    let z = AttnSizes::new(spec);
    let p = spec.shape.p as u64;
    let gn = spec.head_groups();
    let k = gn / p;
    let rb = spec.metp.recv_buffers;
    let foreign = |g: u64| g / k != i;
    // With two buffers, the receive of W[g+1] is posted while group g runs.
    let posts_next = |g: u64| rb == 2 && g + 1 < gn && foreign(g + 1);
    let pending_at = |g: u64| g > 0 && posts_next(g - 1);
    let visible = |t: u64| !spec.causal || t <= i;
    let (qkv_name, qkv_kind) = if spec.metp.store_qkv {
        (names::ATTN_QKV, Stored)
    } else {
        (names::ATTN_QKV_GROUP, Transient)
    };
    // The current and next shards are own or foreign, and the stored outputs grow, in
    // stretches starting at 0, i·k − 1, i·k, (i+1)·k − 1, (i+1)·k and G − 1; the steps at 0,
    // 1 (the middle of the ring), i + 1 (causal: first hidden block) and p − 1.
    let (lo, hi) = ((i * k) as i128, ((i + 1) * k) as i128);
    let starts = [0, lo - 1, lo, hi - 1, hi, gn as i128 - 1];
    let step_starts = [0, 1, i as i128 + 1, p as i128 - 1];
    let (groups, steps): (Vec<u64>, Vec<u64>) = match visit {
        Visit::All => ((0..gn).collect(), (0..p).collect()),
        Visit::Totals => (near(gn, &starts), near(p, &step_starts)),
        Visit::Transients => (exactly(gn, &starts), exactly(p, &step_starts)),
    };
    let kk = k as u128;
    let base = |live: &mut Live| {
        live.add(names::ATTN_WEIGHTS, Static, kk * z.ws);
        live.add(names::OPTIMIZER_MAIN_GRADS_FP32, Static, kk * z.gs);
        live.add(names::ATTN_INPUT, Stored, z.x);
    };
    // The shard of group g: held if posted during g−1, received now if foreign, and the next
    // one posted.
    let acquire = |live: &mut Live, g: u64| {
        if pending_at(g) {
            live.add(names::ATTN_WEIGHT_RECV, Transient, z.ws);
        }
        live.event("weights");
        if foreign(g) && !pending_at(g) {
            live.alloc(names::ATTN_WEIGHT_RECV, Transient, z.ws);
        }
        if posts_next(g) {
            live.alloc(names::ATTN_WEIGHT_RECV, Transient, z.ws);
        }
    };

    // ---------------- forward ----------------
    for &g in &groups {
        let gg = g as u128;
        let mut st = Live::new(i, Phase::FwdAttention, Some(g), None);
        base(&mut st);
        st.add(names::ATTN_OUTPUT_SUM, Transient, z.x);
        st.add(names::ATTN_GROUP_OUTPUTS, Stored, gg * z.og);
        st.add(names::ATTN_LSE, Stored, gg * z.lg);
        if spec.metp.store_qkv {
            st.add(names::ATTN_QKV, Stored, gg * z.qkv);
        }
        acquire(&mut st, g);
        st.event("QKV, running output, log-sum-exp");
        st.alloc(qkv_name, qkv_kind, z.qkv);
        st.alloc(names::ATTN_OUTPUT_ACC_FP32, Transient, z.acc);
        st.alloc(names::ATTN_LSE, Stored, z.lg);
        for &t in &steps {
            let mut s = st.clone();
            s.at.step = Some(t);
            s.event("ring step");
            let cur = p > 1 && t >= 1;
            if cur {
                s.add(names::COMM_KV_RECV, Transient, z.kv);
            }
            s.rising = true;
            let more = t + 1 < p;
            if more && rb == 2 {
                s.alloc(names::COMM_KV_RECV, Transient, z.kv);
            }
            if visible(t) && !spec.fused {
                s.event("block scores, log-sum-exp, probabilities");
                s.alloc(names::ATTN_BLOCK_SCORES, Transient, z.blk);
                s.alloc(names::ATTN_BLOCK_LSE_FP32, Transient, z.bl);
                s.alloc(names::ATTN_BLOCK_PROBS, Transient, z.blk);
                s.free(names::ATTN_BLOCK_SCORES, z.blk, sink);
                s.event("block log-sum-exp, probabilities, output");
                s.alloc(names::ATTN_BLOCK_OUT, Transient, z.ob);
                s.free(names::ATTN_BLOCK_PROBS, z.blk, sink);
                s.free(names::ATTN_BLOCK_OUT, z.ob, sink);
                s.free(names::ATTN_BLOCK_LSE_FP32, z.bl, sink);
            }
            if more {
                if cur {
                    s.free(names::COMM_KV_RECV, z.kv, sink);
                }
                if rb == 1 {
                    s.event("K/V block received");
                    s.alloc(names::COMM_KV_RECV, Transient, z.kv);
                }
            }
            s.finish(sink);
        }
        // After the ring (the last K/V block released): the group's output is stored.
        let mut s = st.clone();
        s.rising = false;
        s.event("group output");
        s.alloc(names::ATTN_GROUP_OUTPUTS, Stored, z.og);
        s.free(names::ATTN_OUTPUT_ACC_FP32, z.acc, sink);
        if !spec.metp.store_qkv {
            s.free(qkv_name, z.qkv, sink);
        }
        if foreign(g) {
            s.free(names::ATTN_WEIGHT_RECV, z.ws, sink);
        }
        s.finish(sink);
    }

    // ---------------- backward ----------------
    let all = gn as u128;
    for &g in &groups {
        let mut st = Live::new(i, Phase::BwdAttention, Some(g), None);
        base(&mut st);
        st.add(names::ATTN_GROUP_OUTPUTS, Stored, all * z.og);
        st.add(names::ATTN_LSE, Stored, all * z.lg);
        if spec.metp.store_qkv {
            st.add(names::ATTN_QKV, Stored, all * z.qkv);
        }
        st.add(names::GRAD_LAYER_OUTPUT, Transient, z.x);
        st.add(names::GRAD_LAYER_INPUT, Transient, z.x);
        acquire(&mut st, g);
        st.event("dO, QKV, D, dQ, dK/dV");
        st.alloc(names::ATTN_GRAD_GROUP_OUTPUT, Transient, z.dog);
        if !spec.metp.store_qkv {
            st.alloc(qkv_name, Transient, z.qkv);
        }
        st.alloc(names::ATTN_DELTA_FP32, Transient, z.del);
        st.alloc(names::ATTN_DQ_ACC_FP32, Transient, z.dq);
        st.alloc(names::ATTN_DKV_ACC_FP32, Transient, z.dkv);
        for &t in &steps {
            let mut s = st.clone();
            s.at.step = Some(t);
            s.event("ring step");
            let cur = p > 1 && t >= 1;
            // From step 1 the traveling dK/dV of another block replaces the own accumulator.
            let dkv_name = if cur {
                s.remove(names::ATTN_DKV_ACC_FP32, z.dkv);
                s.add(names::COMM_DKV_RECV_FP32, Transient, z.dkv);
                s.add(names::COMM_KV_RECV, Transient, z.kv);
                names::COMM_DKV_RECV_FP32
            } else {
                names::ATTN_DKV_ACC_FP32
            };
            s.rising = true;
            let more = t + 1 < p;
            if rb == 2 && p > 1 {
                if more {
                    s.alloc(names::COMM_KV_RECV, Transient, z.kv);
                }
                s.alloc(names::COMM_DKV_RECV_FP32, Transient, z.dkv);
            }
            if visible(t) && !spec.fused {
                s.event("block probabilities, their gradient, score gradient");
                s.alloc(names::ATTN_BLOCK_PROBS, Transient, z.blk);
                s.alloc(names::ATTN_BLOCK_GRAD_PROBS, Transient, z.blk);
                s.alloc(names::ATTN_BLOCK_GRAD_SCORES, Transient, z.blk);
                s.free(names::ATTN_BLOCK_GRAD_PROBS, z.blk, sink);
                s.free(names::ATTN_BLOCK_GRAD_SCORES, z.blk, sink);
                s.free(names::ATTN_BLOCK_PROBS, z.blk, sink);
            }
            if p > 1 {
                if rb == 1 {
                    if cur {
                        s.free(names::COMM_KV_RECV, z.kv, sink);
                    }
                    s.free(dkv_name, z.dkv, sink);
                    if more {
                        s.event("K/V block received");
                        s.alloc(names::COMM_KV_RECV, Transient, z.kv);
                    }
                    s.event("dK/dV received");
                    s.alloc(names::COMM_DKV_RECV_FP32, Transient, z.dkv);
                } else {
                    // The posted buffers become the current ones.
                    if cur {
                        s.free(names::COMM_KV_RECV, z.kv, sink);
                    }
                    s.free(dkv_name, z.dkv, sink);
                }
            }
            s.finish(sink);
        }
        // After p steps and the final hop: the own block's dK/dV is back.
        let mut s = st.clone();
        let dkv_name = if p > 1 {
            s.remove(names::ATTN_DKV_ACC_FP32, z.dkv);
            s.add(names::COMM_DKV_RECV_FP32, Transient, z.dkv);
            names::COMM_DKV_RECV_FP32
        } else {
            names::ATTN_DKV_ACC_FP32
        };
        s.rising = false;
        s.event("dQKV");
        s.alloc(names::GRAD_QKV_GROUP, Transient, z.dqkv);
        s.free(names::ATTN_DQ_ACC_FP32, z.dq, sink);
        s.free(dkv_name, z.dkv, sink);
        s.free(names::ATTN_DELTA_FP32, z.del, sink);
        if !foreign(g) {
            // The owner adds the p − 1 contributions through `rb` receive buffers.
            s.event("weight-gradient receives");
            let n = p - 1;
            let (mut posted, mut queued) = (0, 0);
            for _ in 0..n {
                while queued < rb && posted < n {
                    s.alloc(names::ATTN_WEIGHT_GRAD_RECV_FP32, Transient, z.gs);
                    queued += 1;
                    posted += 1;
                }
                s.free(names::ATTN_WEIGHT_GRAD_RECV_FP32, z.gs, sink);
                queued -= 1;
            }
        } else {
            s.event("weight-gradient contribution");
            s.alloc(names::ATTN_WEIGHT_GRAD_CONTRIB_FP32, Transient, z.gs);
            s.free(names::ATTN_WEIGHT_GRAD_CONTRIB_FP32, z.gs, sink);
        }
        s.free(names::GRAD_QKV_GROUP, z.dqkv, sink);
        s.free(names::ATTN_GRAD_GROUP_OUTPUT, z.dog, sink);
        if !spec.metp.store_qkv {
            s.free(qkv_name, z.qkv, sink);
        }
        if foreign(g) {
            s.free(names::ATTN_WEIGHT_RECV, z.ws, sink);
        }
        s.finish(sink);
    }
}
