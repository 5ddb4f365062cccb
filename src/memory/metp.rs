//! METP (DESIGN §1): every activation is split along the sequence and every weight 1/p; weight
//! shards and K/V blocks travel between devices with send/recv, so no device ever holds a full
//! activation or weight.
//!
//! Stored per layer (c = s/p local tokens): the layer input and attention input (2bch each), all
//! head-group outputs O[i,g] (2bch together), the fp32 log-sum-exp (4·b·a·c), the second norm
//! input and MLP input (2bch each), and 1-byte output dropout masks — 10bch + 4abc (+2bch with
//! dropout), against Korthikanti's 34. Q, K, V and the MLP activation input are recomputed in
//! backward unless stored (knobs). Attention-probability dropout, like FlashAttention's, is
//! regenerated from the RNG state rather than stored.
//!
//! Transients come from the unit inventory ([`super::unit`]): for each phase of the attention
//! and MLP units, the tensors live at the moment where the phase's transient bytes are largest
//! (any device) — so the phase sum is a working set one device really holds at once, not the
//! sum of everything the phase ever allocates. Per head group g of G (default G = p): the
//! group's weight shard in up to `recv_buffers` receive buffers, its Q/K/V for the local
//! tokens, the fp32 running output, K/V receive buffers, and — without a fused kernel — one
//! attention block of b · (a/G) · c · c elements: the O(1/p³) term. Backward adds dO of the
//! group, the fp32 D = rowsum(dO∘O) and dQ, the traveling fp32 dK/dV accumulators, and after
//! the ring dQKV with the weight-gradient reduction to the shard's owner. The MLP ring moves
//! (W1, W2[, W3]) shard pairs, with traveling fp32 gradient accumulators in backward. The
//! unit's static tensors (own weight shard, its fp32 main gradient) are this inventory's
//! `params` share of one layer, its stored ones (attention and MLP inputs, group outputs,
//! log-sum-exp) the stored activations below. Layer-level additions: under full
//! recomputation the stored activations are re-materialised in backward (transients of both
//! backward phases). The vocabulary-parallel head runs the MLP-like ring over vocabulary
//! shards with an online log-sum-exp, so its logits block is b·c·(v/p).

use super::layer::{prod, stored_per_layer, tensor};
use super::unit::{phase_peaks, Unit, UnitSpec};
use super::{params, Block, Kind, MethodMemory, Phase, Tensor};
use crate::config::{Activation, Dims, Recompute, Workload};
use crate::memory::names;

/// METP.
pub struct Metp;

/// Adds a transient of one phase, merged with an identical tensor (same name and bytes) of
/// another phase.
fn add_transient(out: &mut Vec<Tensor>, t: Tensor) {
    match out
        .iter_mut()
        .find(|o| o.kind == Kind::Transient && o.name == t.name && o.bytes_each == t.bytes_each)
    {
        Some(o) => {
            for ph in t.phases {
                if !o.phases.contains(&ph) {
                    o.phases.push(ph);
                }
            }
        }
        None => out.push(t),
    }
}

const BB: &[Phase] = &[Phase::BwdAttention, Phase::BwdMlp];

impl MethodMemory for Metp {
    fn activation_tensors(&self, w: &Workload, d: &Dims<u128>) -> Vec<Tensor> {
        let o = &w.options;
        let m = &o.metp;
        let g = o.metp.head_groups(w.p) as u128;
        let rb = m.recv_buffers as u128;
        let c = d.s / d.p;
        let rows = d.b * c;
        let dropout = w.dropout();
        let kv_g = d.kv_heads_per(g) * d.d; // K (or V) width of one head group
        let qkv_g = d.h / g + 2 * kv_g; // Q + K + V width of one head group
        let act = match w.model.activation {
            Activation::Gelu => 1,
            Activation::Swiglu => 2,
        };
        let l = d.layers;
        let bch = prod(&[rows, d.h]);

        // Stored for backward, per layer, before recomputation policy.
        let mut keep: Vec<(&'static str, Block, u128)> = vec![
            (names::NORM_LN1_INPUT, Block::Norm, 2 * bch),
            (names::ATTN_INPUT, Block::Attention, 2 * bch),
            (names::ATTN_GROUP_OUTPUTS, Block::Attention, 2 * bch),
            (names::ATTN_LSE, Block::Attention, prod(&[4, d.a, rows])),
        ];
        if m.store_qkv {
            keep.push((
                names::ATTN_QKV,
                Block::Attention,
                prod(&[2, rows, g * qkv_g]),
            ));
        }
        if dropout {
            keep.push((names::ATTN_OUT_DROPOUT_MASK, Block::Attention, bch));
        }
        keep.push((names::NORM_LN2_INPUT, Block::Norm, 2 * bch));
        keep.push((names::MLP_INPUT, Block::Mlp, 2 * bch));
        if m.store_mlp_act {
            keep.push((
                names::MLP_ACT_INPUT,
                Block::Mlp,
                prod(&[2 * act, rows, d.f]),
            ));
        }
        if dropout {
            keep.push((names::MLP_OUT_DROPOUT_MASK, Block::Mlp, bch));
        }
        let mut out = Vec::new();
        for (name, block, bytes) in keep {
            if o.recompute == Recompute::Full && name != names::NORM_LN1_INPUT {
                out.push(tensor(name, block, Kind::Transient, bytes, 1, false, BB));
            } else {
                out.push(stored_per_layer(name, block, bytes, l, false));
            }
        }

        // Transients: per phase, the working set at the moment of the unit inventory where it
        // is largest (any device), so that a phase's sum is what a device really holds at once.
        for unit in [Unit::Attention, Unit::Mlp] {
            let spec = UnitSpec::from_workload(w, unit);
            // `check_degree` and the sequence multiple have validated the unit already.
            for moment in phase_peaks(&spec).unwrap_or_default() {
                for t in moment.tensors {
                    if t.kind == Kind::Transient {
                        add_transient(&mut out, t);
                    }
                }
            }
        }

        // Head: vocabulary shards travel the ring; logits of one (local tokens × v/p) block.
        let v_local = if o.vocab_parallel {
            d.v.div_ceil(d.p)
        } else {
            d.v
        };
        if o.vocab_parallel && d.p > 1 {
            out.push(tensor(
                names::HEAD_WEIGHT_RECV,
                Block::Head,
                Kind::Transient,
                prod(&[rb, 2, v_local, d.h]),
                1,
                false,
                &[Phase::Loss],
            ));
        }
        out.extend(params::edge_tensors(w, d, rows, false, rows, v_local));
        out
    }

    fn notes(&self, w: &Workload) -> Vec<String> {
        let m = &w.options.metp;
        let mut n = vec![format!(
            "metp: {} head groups, weight exchange by {}, {} receive buffer(s), QKV {}, MLP activation input {}",
            w.options.metp.head_groups(w.p),
            match m.weight_exchange {
                crate::config::WeightExchange::Ring => "ring",
                crate::config::WeightExchange::Broadcast => "broadcast",
            },
            m.recv_buffers,
            if m.store_qkv { "stored" } else { "recomputed" },
            if m.store_mlp_act { "stored" } else { "recomputed" },
        )];
        n.push("metp: each phase's transients are the largest working set one device holds at once in the unit inventory (memory::unit)".into());
        if w.dropout() {
            n.push("metp: attention-probability dropout masks are regenerated from the RNG state, not stored".into());
        }
        n
    }
}
