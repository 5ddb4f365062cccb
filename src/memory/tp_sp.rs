//! Megatron TP + sequence parallelism (Korthikanti et al. 2022): the boundary activations are
//! split along the sequence too, so every stored tensor is 1/p — (sbh/t)(34 + 5as/h). The price
//! is an all-gathered copy of the block input (b·s·h) that lives while each block runs, forward
//! and backward (Megatron gathers again in backward for the weight gradient).
//!
//! With context parallelism (Megatron CP, cp > 1) each group of p devices holds s/cp tokens:
//! the boundary tensors are b·s/(cp·p) rows, the gathered block b·s/cp, and attention runs as a
//! ring over the cp groups on blocks of s/cp keys with the online softmax (only the fp32
//! log-sum-exp stored), with two K/V receive buffers and traveling fp32 dK/dV in backward, as
//! ring attention does. All-gathered (LLaMA 3, `CpComm::AllGather`) every one of the cp K/V
//! blocks is held at once, and in backward every block's fp32 K/V gradient.

use super::layer::{layer_tensors, prod, tensor, Core, LayerLayout, Part};
use super::ring::kv_ring_buffers;
use super::tp::vocab_local;
use super::{params, Block, Kind, MethodMemory, Phase, Tensor};
use crate::config::{CpComm, Dims, Workload};
use crate::memory::names;

/// Megatron TP + SP.
pub struct TpSp;

impl MethodMemory for TpSp {
    fn activation_tensors(&self, w: &Workload, d: &Dims<u128>) -> Vec<Tensor> {
        let group_seq = d.s / d.cp;
        let local_rows = d.b * (group_seq / d.p);
        let full_rows = d.b * group_seq;
        let inner = Part {
            rows: full_rows,
            heads: d.a / d.p,
            kv_heads: d.kv_heads_per(d.p),
            f: d.f / d.p,
            replicated: false,
        };
        let layout = LayerLayout {
            boundary: Part {
                rows: local_rows,
                heads: d.a,
                kv_heads: d.a_kv,
                f: d.f,
                replicated: false,
            },
            attention: inner,
            mlp: inner,
            core: if d.cp > 1 {
                Core::Blockwise {
                    block_cols: group_seq,
                }
            } else {
                Core::Scores { cols: d.s }
            },
            flash: w.options.flash,
        };
        let mut out = layer_tensors(w, d, &layout);
        if d.cp > 1 {
            // The ring's two receive buffers, or every cp block of K/V (and of their fp32
            // gradients in backward) when they are all-gathered (LLaMA 3).
            let blocks = match w.options.runtime.cp_comm {
                CpComm::Ring => 2,
                CpComm::AllGather => d.cp,
            };
            out.extend(kv_ring_buffers(
                full_rows,
                d.kv_heads_per(d.p) * d.d,
                blocks,
            ));
        }
        out.push(tensor(
            names::COMM_ALLGATHER_INPUT,
            Block::Attention,
            Kind::Transient,
            prod(&[2, full_rows, d.h]),
            1,
            d.p > 1,
            &Phase::ALL,
        ));
        out.extend(params::edge_tensors(
            w,
            d,
            local_rows,
            false,
            full_rows,
            vocab_local(d, &w.options),
        ));
        out
    }
}
