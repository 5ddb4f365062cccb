//! Megatron tensor parallelism (Shoeybi et al. 2019): attention heads and MLP columns split
//! 1/p; the layer-boundary activations (norm inputs, QKV and fc1 inputs, dropout masks) are
//! replicated on every device — Korthikanti et al.'s sbh(10 + 24/t + 5as/(ht)).

use super::layer::{layer_tensors, Core, LayerLayout, Part};
use super::{params, MethodMemory, Tensor};
use crate::config::{Dims, Options, Workload};

/// Megatron TP.
pub struct Tp;

/// The local vocabulary slice: 1/p (padded) when vocabulary-parallel, else all of it.
pub(crate) fn vocab_local(d: &Dims<u128>, options: &Options) -> u128 {
    if options.vocab_parallel {
        d.v.div_ceil(d.p)
    } else {
        d.v
    }
}

impl MethodMemory for Tp {
    fn activation_tensors(&self, w: &Workload, d: &Dims<u128>) -> Vec<Tensor> {
        let rows = d.b * d.s;
        let replicated = d.p > 1;
        let inner = Part {
            rows,
            heads: d.a / d.p,
            kv_heads: d.kv_heads_per(d.p),
            f: d.f / d.p,
            replicated: false,
        };
        let layout = LayerLayout {
            boundary: Part {
                rows,
                heads: d.a,
                kv_heads: d.a_kv,
                f: d.f,
                replicated,
            },
            attention: inner,
            mlp: inner,
            core: Core::Scores { cols: d.s },
            flash: w.options.flash,
        };
        let mut out = layer_tensors(w, d, &layout);
        out.extend(params::edge_tensors(
            w,
            d,
            rows,
            replicated,
            rows,
            vocab_local(d, &w.options),
        ));
        out
    }
}
