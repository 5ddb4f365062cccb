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
//! Transients: per head group g of G (default G = p), the group's weight shard in `recv_buffers`
//! buffers, its Q/K/V for the local tokens, K/V receive buffers, and — without a fused kernel —
//! one attention block of b · (a/G) · c · c elements: the O(1/p³) term. Backward adds traveling
//! fp32 gradient accumulators (weights and dK/dV). The MLP ring moves (W1, W2[, W3]) shard pairs;
//! the vocabulary-parallel head runs the same ring over vocabulary shards with an online
//! log-sum-exp, so its logits block is b·c·(v/p).

use super::layer::{prod, stored_per_layer, tensor, Dims};
use super::ring::kv_ring_buffers;
use super::{divisible, params, Block, Kind, MethodMemory, Phase, Tensor};
use crate::config::{Activation, Model, Options, Recompute, Workload};

/// METP.
pub struct Metp;

fn head_groups(p: u64, options: &Options) -> u64 {
    options.metp.head_groups.unwrap_or(p)
}

const FA: &[Phase] = &[Phase::FwdAttention];
const BA: &[Phase] = &[Phase::BwdAttention];
const FBA: &[Phase] = &[Phase::FwdAttention, Phase::BwdAttention];
const FM: &[Phase] = &[Phase::FwdMlp];
const BM: &[Phase] = &[Phase::BwdMlp];
const FBM: &[Phase] = &[Phase::FwdMlp, Phase::BwdMlp];
const BB: &[Phase] = &[Phase::BwdAttention, Phase::BwdMlp];

impl MethodMemory for Metp {
    fn check_degree(&self, model: &Model, p: u64, options: &Options) -> Result<(), String> {
        let g = head_groups(p, options);
        if g == 0 || !g.is_multiple_of(p) {
            return Err(format!(
                "head groups ({g}) must be a positive multiple of p = {p}"
            ));
        }
        divisible("heads", model.heads, p)?;
        if !model.heads.is_multiple_of(g) {
            return Err(format!(
                "heads ({}) is not divisible by head groups ({g})",
                model.heads
            ));
        }
        if !model.kv_heads.is_multiple_of(g) && !g.is_multiple_of(model.kv_heads) {
            return Err(format!(
                "kv_heads ({}) must divide head groups ({g}) or be divisible by it",
                model.kv_heads
            ));
        }
        divisible("ffn_hidden", model.ffn_hidden, p)
    }

    fn seq_multiple(&self, _: &Model, p: u64, options: &Options) -> u64 {
        super::ring_seq_multiple(p, options)
    }

    fn activation_tensors(&self, w: &Workload, d: &Dims) -> Vec<Tensor> {
        let o = &w.options;
        let m = &o.metp;
        let g = head_groups(w.p, o) as u128;
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
            ("norm.ln1_input", Block::Norm, 2 * bch),
            ("attn.input", Block::Attention, 2 * bch),
            ("attn.group_outputs", Block::Attention, 2 * bch),
            ("attn.lse", Block::Attention, prod(&[4, d.a, rows])),
        ];
        if m.store_qkv {
            keep.push(("attn.qkv", Block::Attention, prod(&[2, rows, g * qkv_g])));
        }
        if dropout {
            keep.push(("attn.out_dropout_mask", Block::Attention, bch));
        }
        keep.push(("norm.ln2_input", Block::Norm, 2 * bch));
        keep.push(("mlp.input", Block::Mlp, 2 * bch));
        if m.store_mlp_act {
            keep.push(("mlp.act_input", Block::Mlp, prod(&[2 * act, rows, d.f])));
        }
        if dropout {
            keep.push(("mlp.out_dropout_mask", Block::Mlp, bch));
        }
        let mut out = Vec::new();
        for (name, block, bytes) in keep {
            if o.recompute == Recompute::Full && name != "norm.ln1_input" {
                out.push(tensor(name, block, Kind::Transient, bytes, 1, false, BB));
            } else {
                out.push(stored_per_layer(name, block, bytes, l, false));
            }
        }

        // Attention: one head group at a time.
        let attn_shard_bytes = prod(&[2, d.h, d.h / g + qkv_g]); // W_qkv[g] and W_o[g], bf16
        if d.p > 1 {
            out.push(tensor(
                "attn.weight_recv",
                Block::Attention,
                Kind::Transient,
                rb * attn_shard_bytes,
                1,
                false,
                FBA,
            ));
            out.push(tensor(
                "attn.weight_grad_recv_fp32",
                Block::Attention,
                Kind::Transient,
                rb * 2 * attn_shard_bytes,
                1,
                false,
                BA,
            ));
            out.extend(kv_ring_buffers(rows, kv_g, rb));
        }
        if !m.store_qkv {
            out.push(tensor(
                "attn.qkv_group",
                Block::Attention,
                Kind::Transient,
                prod(&[2, rows, qkv_g]),
                1,
                false,
                FBA,
            ));
        }
        out.push(tensor(
            "grad.qkv_group",
            Block::Attention,
            Kind::Transient,
            prod(&[2, rows, qkv_g]),
            1,
            false,
            BA,
        ));
        let heads_g = d.a / g;
        if o.flash {
            out.push(tensor(
                "attn.output_acc_fp32",
                Block::Attention,
                Kind::Transient,
                prod(&[4, rows, d.h / g]),
                1,
                false,
                FA,
            ));
        } else {
            let block = prod(&[heads_g, rows, c]);
            // Forward: scores and probabilities of one block; backward: recomputed
            // probabilities and the gradients of probabilities and scores.
            out.push(tensor(
                "attn.block_scores",
                Block::Attention,
                Kind::Transient,
                prod(&[2, block]),
                1,
                false,
                FA,
            ));
            out.push(tensor(
                "attn.block_probs",
                Block::Attention,
                Kind::Transient,
                prod(&[2, block]),
                1,
                false,
                FBA,
            ));
            out.push(tensor(
                "attn.block_grad_probs",
                Block::Attention,
                Kind::Transient,
                prod(&[2, block]),
                1,
                false,
                BA,
            ));
            out.push(tensor(
                "attn.block_grad_scores",
                Block::Attention,
                Kind::Transient,
                prod(&[2, block]),
                1,
                false,
                BA,
            ));
        }
        out.push(tensor(
            "attn.output_sum",
            Block::Attention,
            Kind::Transient,
            2 * bch,
            1,
            false,
            FA,
        ));

        // MLP: the (W1, W2[, W3]) shard pair of one device at a time.
        let f_p = d.f / d.p;
        let mlp_shard_bytes = prod(&[2, w.model.mlp_matrices() as u128, d.h, f_p]);
        if d.p > 1 {
            out.push(tensor(
                "mlp.weight_recv",
                Block::Mlp,
                Kind::Transient,
                rb * mlp_shard_bytes,
                1,
                false,
                FBM,
            ));
            out.push(tensor(
                "mlp.weight_grad_recv_fp32",
                Block::Mlp,
                Kind::Transient,
                rb * 2 * mlp_shard_bytes,
                1,
                false,
                BM,
            ));
        }
        if !m.store_mlp_act {
            out.push(tensor(
                "mlp.act_input_block",
                Block::Mlp,
                Kind::Transient,
                prod(&[2 * act, rows, f_p]),
                1,
                false,
                FBM,
            ));
        }
        out.push(tensor(
            "mlp.act_output_block",
            Block::Mlp,
            Kind::Transient,
            prod(&[2, rows, f_p]),
            1,
            false,
            FBM,
        ));
        out.push(tensor(
            "grad.mlp_act_block",
            Block::Mlp,
            Kind::Transient,
            prod(&[2 * act, rows, f_p]),
            1,
            false,
            BM,
        ));
        out.push(tensor(
            "mlp.output_sum",
            Block::Mlp,
            Kind::Transient,
            2 * bch,
            1,
            false,
            FM,
        ));
        out.push(tensor(
            "grad.layer_output",
            Block::Attention,
            Kind::Transient,
            2 * bch,
            1,
            false,
            BB,
        ));
        out.push(tensor(
            "grad.layer_input",
            Block::Attention,
            Kind::Transient,
            2 * bch,
            1,
            false,
            BB,
        ));

        // Head: vocabulary shards travel the ring; logits of one (local tokens × v/p) block.
        let v_local = if o.vocab_parallel {
            d.v.div_ceil(d.p)
        } else {
            d.v
        };
        if o.vocab_parallel && d.p > 1 {
            out.push(tensor(
                "head.weight_recv",
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
            head_groups(w.p, &w.options),
            match m.weight_exchange {
                crate::config::WeightExchange::Ring => "ring",
                crate::config::WeightExchange::Broadcast => "broadcast",
            },
            m.recv_buffers,
            if m.store_qkv { "stored" } else { "recomputed" },
            if m.store_mlp_act { "stored" } else { "recomputed" },
        )];
        if w.dropout() {
            n.push("metp: attention-probability dropout masks are regenerated from the RNG state, not stored".into());
        }
        n
    }
}
