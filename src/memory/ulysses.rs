//! DeepSpeed-Ulysses (Jacobs et al. 2023): activations split along the sequence; inside
//! attention an all-to-all trades the sequence split for a head split, so each device holds the
//! full sequence for a/p heads — same element count, (sbh/p)(34 + 5as/h) per layer without
//! flash. Weights are replicated unless ZeRO shards them. The all-to-all needs a second copy of
//! Q, K, V (and of their gradients) while it runs.

use super::layer::{layer_tensors, prod, tensor, Core, LayerLayout, Part};
use super::{params, Block, Kind, MethodMemory, Phase, Tensor};
use crate::config::{Dims, Workload};
use crate::memory::names;

/// DeepSpeed-Ulysses.
pub struct Ulysses;

impl MethodMemory for Ulysses {
    fn activation_tensors(&self, w: &Workload, d: &Dims<u128>) -> Vec<Tensor> {
        let local_rows = d.b * (d.s / d.p);
        let seq_split = Part {
            rows: local_rows,
            heads: d.a,
            kv_heads: d.a_kv,
            f: d.f,
            replicated: false,
        };
        let layout = LayerLayout {
            boundary: seq_split,
            attention: Part {
                rows: d.b * d.s,
                heads: d.a / d.p,
                kv_heads: d.kv_heads_per(d.p),
                f: d.f,
                replicated: false,
            },
            mlp: seq_split,
            core: Core::Scores { cols: d.s },
            flash: w.options.flash,
        };
        let mut out = layer_tensors(w, d, &layout);
        let qkv_width = d.h + 2 * d.kv_heads_per(1) * d.d;
        out.push(tensor(
            names::COMM_ALL_TO_ALL_QKV,
            Block::Attention,
            Kind::Transient,
            prod(&[2, local_rows, qkv_width]),
            1,
            false,
            &[Phase::FwdAttention, Phase::BwdAttention],
        ));
        out.extend(params::edge_tensors(
            w, d, local_rows, false, local_rows, d.v,
        ));
        out
    }
}
