//! Ring self-attention (Li et al. 2021, ColossalAI `RingQK`/`RingAV`): activations split along
//! the sequence; K then V travel the ring, and the full score rows of the local queries
//! (a × s/p × s) are stored — (sbh/p)(34 + 5as/h) per layer. FlashAttention does not apply. In
//! backward the implementation builds full-length dK and dV and all-reduces them, a replicated
//! transient of 2·(2·b·s·h_kv).

use super::layer::{layer_tensors, prod, tensor, Core, LayerLayout, Part};
use super::{params, Block, Kind, MethodMemory, Phase, Tensor};
use crate::config::{Dims, Workload};
use crate::memory::names;

/// Ring self-attention.
pub struct Rsa;

impl MethodMemory for Rsa {
    fn activation_tensors(&self, w: &Workload, d: &Dims<u128>) -> Vec<Tensor> {
        let local_rows = d.b * (d.s / d.p);
        let part = Part {
            rows: local_rows,
            heads: d.a,
            kv_heads: d.a_kv,
            f: d.f,
            replicated: false,
        };
        let layout = LayerLayout {
            boundary: part,
            attention: part,
            mlp: part,
            core: Core::Scores { cols: d.s },
            // RSA materialises the score rows by construction.
            flash: false,
        };
        let mut out = layer_tensors(w, d, &layout);
        let kv_width = d.a_kv * d.d;
        if d.p > 1 {
            out.push(tensor(
                names::COMM_KV_CHUNK_RECV,
                Block::Attention,
                Kind::Transient,
                prod(&[2, local_rows, kv_width]),
                1,
                false,
                &[Phase::FwdAttention, Phase::BwdAttention],
            ));
            out.push(tensor(
                names::ATTN_GRAD_KV_FULL_LENGTH,
                Block::Attention,
                Kind::Transient,
                prod(&[2, 2, d.b * d.s, kv_width]),
                1,
                true,
                &[Phase::BwdAttention],
            ));
        }
        out.extend(params::edge_tensors(
            w, d, local_rows, false, local_rows, d.v,
        ));
        out
    }

    fn notes(&self, w: &Workload) -> Vec<String> {
        if w.options.flash {
            vec!["rsa: FlashAttention does not apply to ring self-attention; score rows are materialised and stored".into()]
        } else {
            Vec::new()
        }
    }
}
