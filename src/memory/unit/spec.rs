//! What a unit is: which unit, its sizes, and the options that change what a device holds.

use serde::Serialize;

use super::Phase;
use crate::config::{Activation, WeightExchange, Workload};

/// Which computing unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    /// Self-attention with QKV and output projections: `O = softmax(QKᵀ)V`, then `O·W_o`.
    Attention,
    /// MLP: `GeLU(X·W1)·W2` (or SwiGLU with a third matrix).
    Mlp,
}

impl Unit {
    /// Forward and backward phase of the unit.
    pub fn phases(self) -> [Phase; 2] {
        match self {
            Unit::Attention => [Phase::FwdAttention, Phase::BwdAttention],
            Unit::Mlp => [Phase::FwdMlp, Phase::BwdMlp],
        }
    }
}

/// Problem sizes of one unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UnitShape {
    /// Micro-batch.
    pub b: u64,
    /// Sequence length.
    pub s: u64,
    /// Hidden size.
    pub h: u64,
    /// Attention heads.
    pub a: u64,
    /// MLP width.
    pub f: u64,
    /// Devices.
    pub p: u64,
}

/// One METP unit with its options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UnitSpec {
    /// Unit.
    pub unit: Unit,
    /// Sizes.
    pub shape: UnitShape,
    /// Causal attention with contiguous sequence blocks (device i holds tokens i·c..(i+1)·c):
    /// blocks above the diagonal are skipped (their K/V still travel).
    pub causal: bool,
    /// Fused attention blocks (nothing of a block in device memory) instead of unfused.
    pub fused: bool,
    /// Receive buffers per traveling tensor: 1 or 2.
    pub recv_buffers: u64,
    /// How attention weight shards reach the devices (no effect on what a device holds).
    pub weight_exchange: WeightExchange,
    /// Head groups G of the outer attention loop (a multiple of p; p by default).
    pub head_groups: u64,
    /// K/V heads (`a` for multi-head attention).
    pub kv_heads: u64,
    /// MLP activation.
    pub activation: Activation,
    /// Q, K, V stored for backward instead of recomputed.
    pub store_qkv: bool,
    /// The MLP activation input stored for backward instead of recomputed.
    pub store_mlp_act: bool,
}

impl UnitSpec {
    /// A unit with the runtime's defaults: non-causal, fused, double buffered, ring weight
    /// exchange, G = p, multi-head attention, GeLU, Q/K/V and the activation input recomputed.
    pub fn new(unit: Unit, shape: UnitShape) -> UnitSpec {
        UnitSpec {
            unit,
            shape,
            causal: false,
            fused: true,
            recv_buffers: 2,
            weight_exchange: WeightExchange::Ring,
            head_groups: shape.p,
            kv_heads: shape.a,
            activation: Activation::Gelu,
            store_qkv: false,
            store_mlp_act: false,
        }
    }

    /// The unit of one layer of a METP workload. Causal attention with zig-zag (load-balanced)
    /// blocks is taken as non-causal: every step then computes a block, at most (s/p)² — with
    /// contiguous blocks the last device does too, so both have the same largest working set.
    pub fn from_workload(w: &Workload, unit: Unit) -> UnitSpec {
        let m = &w.model;
        let o = &w.options;
        UnitSpec {
            unit,
            shape: UnitShape {
                b: w.micro_batch,
                s: w.seq,
                h: m.hidden,
                a: m.heads,
                f: m.ffn_hidden,
                p: w.p,
            },
            causal: o.causal && !o.causal_zigzag,
            fused: o.flash,
            recv_buffers: o.metp.recv_buffers,
            weight_exchange: o.metp.weight_exchange,
            head_groups: o.metp.head_groups.unwrap_or(w.p),
            kv_heads: m.kv_heads,
            activation: m.activation,
            store_qkv: o.metp.store_qkv,
            store_mlp_act: o.metp.store_mlp_act,
        }
    }

    /// `Err` with a reason unless the sizes and options describe a unit METP can run.
    pub fn check(&self) -> Result<(), String> {
        let UnitShape { b, s, h, a, f, p } = self.shape;
        for (what, v) in [("degree p", p), ("micro-batch b", b), ("sequence s", s)] {
            if v == 0 {
                return Err(format!("{what} must be positive"));
            }
        }
        if h == 0 {
            return Err("hidden h must be positive".into());
        }
        if !(1..=2).contains(&self.recv_buffers) {
            return Err(format!(
                "receive buffers must be 1 or 2, not {}",
                self.recv_buffers
            ));
        }
        if !s.is_multiple_of(p) {
            return Err(format!("sequence length ({s}) is not divisible by p = {p}"));
        }
        match self.unit {
            Unit::Attention => {
                let g = self.head_groups;
                if a == 0 || !h.is_multiple_of(a) {
                    return Err(format!("hidden ({h}) is not divisible by heads ({a})"));
                }
                if g == 0 || !g.is_multiple_of(p) {
                    return Err(format!(
                        "head groups ({g}) must be a positive multiple of p = {p}"
                    ));
                }
                if !a.is_multiple_of(g) {
                    return Err(format!("heads ({a}) is not divisible by head groups ({g})"));
                }
                let kv = self.kv_heads;
                if kv == 0 || !(kv.is_multiple_of(g) || g.is_multiple_of(kv)) {
                    return Err(format!(
                        "kv_heads ({kv}) must divide head groups ({g}) or be divisible by it"
                    ));
                }
            }
            Unit::Mlp => {
                if f == 0 || !f.is_multiple_of(p) {
                    return Err(format!("MLP width ({f}) is not divisible by p = {p}"));
                }
            }
        }
        Ok(())
    }
}
