//! Ring attention / context parallelism (Liu et al. 2023; Megatron CP): every activation split
//! along the sequence; attention runs blockwise with an online softmax, so only the fp32
//! log-sum-exp is stored (34sbh/p + 4abs/p per layer). K/V blocks travel the ring in two
//! receive buffers; backward also moves fp32 dK/dV accumulators. Without a fused kernel one
//! (s/p)×(s/p) score block per head is materialised per ring step and discarded.

use super::layer::{layer_tensors, prod, tensor, Core, LayerLayout, Part};
use super::{params, Block, Kind, MethodMemory, Phase, Tensor};
use crate::config::{Dims, Workload};
use crate::memory::names;

/// Ring attention.
pub struct Ring;

/// Double-buffered K/V receive buffers and, in backward, the traveling fp32 dK/dV.
pub(crate) fn kv_ring_buffers(rows: u128, kv_width: u128, buffers: u128) -> Vec<Tensor> {
    vec![
        tensor(
            names::COMM_KV_RECV,
            Block::Attention,
            Kind::Transient,
            prod(&[buffers, 2, 2, rows, kv_width]),
            1,
            false,
            &[Phase::FwdAttention, Phase::BwdAttention],
        ),
        tensor(
            names::COMM_DKV_RECV_FP32,
            Block::Attention,
            Kind::Transient,
            prod(&[buffers, 2, 4, rows, kv_width]),
            1,
            false,
            &[Phase::BwdAttention],
        ),
    ]
}

impl MethodMemory for Ring {
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
            core: Core::Blockwise {
                block_cols: d.s / d.p,
            },
            flash: w.options.flash,
        };
        let mut out = layer_tensors(w, d, &layout);
        if d.p > 1 {
            out.extend(kv_ring_buffers(local_rows, d.a_kv * d.d, 2));
        }
        out.extend(params::edge_tensors(
            w, d, local_rows, false, local_rows, d.v,
        ));
        out
    }

    fn notes(&self, w: &Workload) -> Vec<String> {
        let mut n = vec![
            "ring: attention is blockwise (online softmax); only the log-sum-exp is stored"
                .to_string(),
        ];
        if w.dropout() {
            n.push("ring: attention-probability dropout masks are regenerated from the RNG state, not stored".into());
        }
        n
    }
}
