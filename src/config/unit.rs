//! One METP (or TP) computing unit — the attention or MLP block of one layer — as every layer
//! that deals with units describes it: the memory layer's unit inventory (`memory::unit`), the
//! runtimes that execute it (the backends' units, `backend::cpu::units` and the CUDA units) and
//! the predictions of its time (`backend::predict`). Its METP knobs are the workload's [`MetpOptions`], so a unit and a
//! layer of a workload cannot disagree on them, and [`UnitSupport`] is how an executor says
//! which options it honours (it refuses the others with one line instead of running something
//! else).

use serde::Serialize;

use super::{Activation, MetpOptions, WeightExchange, Workload};
use crate::error::{Error, Result};

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
    /// `attention` or `mlp`.
    pub fn id(self) -> &'static str {
        match self {
            Unit::Attention => "attention",
            Unit::Mlp => "mlp",
        }
    }
}

/// How a unit is parallelised over its p devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecMethod {
    /// METP (DESIGN §1).
    Metp,
    /// Megatron tensor parallelism: heads / MLP columns split, activations replicated,
    /// all-reduce of the block output (forward) and input gradient (backward).
    Tp,
}

impl ExecMethod {
    /// Method id as the rest of the crate spells it.
    pub fn id(self) -> &'static str {
        match self {
            ExecMethod::Metp => "metp",
            ExecMethod::Tp => "tp",
        }
    }
}

/// Problem sizes of one unit (element counts of the matrices the runtimes allocate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UnitShape {
    /// Micro-batch b.
    pub b: usize,
    /// Sequence length s.
    pub s: usize,
    /// Hidden size h.
    pub h: usize,
    /// Attention heads a.
    pub a: usize,
    /// MLP width f.
    pub f: usize,
    /// Devices p.
    pub p: usize,
}

impl UnitShape {
    /// Local tokens per device, s/p.
    pub fn c(&self) -> usize {
        self.s / self.p
    }
    /// Head dimension h/a.
    pub fn d(&self) -> usize {
        self.h / self.a
    }
    /// Hidden width of one head group, h/p.
    pub fn hg(&self) -> usize {
        self.h / self.p
    }
    /// Heads of one head group, a/p.
    pub fn ag(&self) -> usize {
        self.a / self.p
    }
    /// MLP width of one shard, f/p.
    pub fn fp(&self) -> usize {
        self.f / self.p
    }

    /// The sizes as u64, in the order b, s, h, a, f, p (for byte arithmetic).
    pub fn as_u64(&self) -> [u64; 6] {
        [self.b, self.s, self.h, self.a, self.f, self.p].map(|x| x as u64)
    }

    /// Checks that `method` can run `unit` with these sizes: positive sizes, heads dividing
    /// the hidden size, heads (attention) or the MLP width divisible by p, and for METP the
    /// sequence divisible by p.
    pub fn check(&self, unit: Unit, method: ExecMethod) -> Result<()> {
        let err = |message: String| Error::InvalidConfig {
            method: method.id().to_string(),
            p: self.p as u64,
            message,
        };
        let UnitShape { b, s, h, a, f, p } = *self;
        if p == 0 {
            return Err(err("the degree p must be positive".into()));
        }
        for (name, v) in [("micro-batch b", b), ("sequence s", s), ("hidden h", h)] {
            if v == 0 {
                return Err(err(format!("{name} must be positive")));
            }
        }
        let divides = |name: &str, n: usize| {
            if n.is_multiple_of(p) {
                Ok(())
            } else {
                Err(err(format!("{name} ({n}) is not divisible by p = {p}")))
            }
        };
        if method == ExecMethod::Metp {
            divides("sequence length", s)?;
        }
        match unit {
            Unit::Attention => {
                if a == 0 {
                    return Err(err("heads a must be positive".into()));
                }
                if h % a != 0 {
                    return Err(err(format!("hidden ({h}) is not divisible by heads ({a})")));
                }
                divides("heads", a)
            }
            Unit::Mlp => {
                if f == 0 {
                    return Err(err("MLP width f must be positive".into()));
                }
                divides("MLP width", f)
            }
        }
    }
}

/// One unit with everything that changes what it computes, holds or sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UnitSpec {
    /// Which unit.
    pub unit: Unit,
    /// How it is parallelised.
    pub method: ExecMethod,
    /// Sizes.
    pub shape: UnitShape,
    /// Causal attention with contiguous sequence blocks (device i holds tokens i·c..(i+1)·c):
    /// blocks above the diagonal are skipped (their K/V still travel).
    pub causal: bool,
    /// Fused attention blocks (online softmax over per-head tiles; nothing of a block in
    /// device memory) instead of unfused (one block's scores and probabilities materialised).
    pub fused: bool,
    /// METP's knobs: head groups, weight exchange, receive buffers, what backward stores.
    pub metp: MetpOptions,
    /// K/V heads (`a` for multi-head attention).
    pub kv_heads: usize,
    /// MLP activation.
    pub activation: Activation,
}

impl UnitSpec {
    /// A unit with the defaults: non-causal, fused, the workload's METP defaults
    /// ([`MetpOptions::default`]: G = p, broadcast weights, two receive buffers, Q/K/V and the
    /// activation input recomputed), multi-head attention, GeLU.
    pub fn new(unit: Unit, method: ExecMethod, shape: UnitShape) -> UnitSpec {
        UnitSpec {
            unit,
            method,
            shape,
            causal: false,
            fused: true,
            metp: MetpOptions::default(),
            kv_heads: shape.a,
            activation: Activation::Gelu,
        }
    }

    /// The METP unit of one layer of `w`. Causal attention with zig-zag (load-balanced) blocks
    /// is taken as non-causal: every step then computes a block, at most (s/p)² — with
    /// contiguous blocks the last device does too, so both have the same largest working set.
    pub fn from_workload(w: &Workload, unit: Unit) -> UnitSpec {
        let m = &w.model;
        let o = &w.options;
        let n = |x: u64| x as usize;
        UnitSpec {
            unit,
            method: ExecMethod::Metp,
            shape: UnitShape {
                b: n(w.micro_batch),
                s: n(w.seq),
                h: n(m.hidden),
                a: n(m.heads),
                f: n(m.ffn_hidden),
                p: n(w.p),
            },
            causal: o.causal && !o.causal_zigzag,
            fused: o.flash,
            metp: o.metp,
            kv_heads: n(m.kv_heads),
            activation: m.activation,
        }
    }

    /// Head groups G of the outer attention loop (p unless the METP options say otherwise).
    pub fn head_groups(&self) -> u64 {
        self.metp.head_groups(self.shape.p as u64)
    }

    /// Checks that the sizes and options describe a unit its method can run: the shape
    /// ([`UnitShape::check`]), one or two receive buffers, and for METP attention head groups
    /// that are a multiple of p and divide the heads, and K/V heads that divide the groups or
    /// are divisible by them.
    pub fn check(&self) -> Result<()> {
        self.shape.check(self.unit, self.method)?;
        let err = |message: String| Error::InvalidConfig {
            method: self.method.id().to_string(),
            p: self.shape.p as u64,
            message,
        };
        let rb = self.metp.recv_buffers;
        if !(1..=2).contains(&rb) {
            return Err(err(format!("receive buffers must be 1 or 2, not {rb}")));
        }
        if self.unit == Unit::Attention {
            let (p, a) = (self.shape.p as u64, self.shape.a as u64);
            let g = self.head_groups();
            if g == 0 || !g.is_multiple_of(p) {
                return Err(err(format!(
                    "head groups ({g}) must be a positive multiple of p = {p}"
                )));
            }
            if !a.is_multiple_of(g) {
                return Err(err(format!(
                    "heads ({a}) is not divisible by head groups ({g})"
                )));
            }
            super::method::kv_heads_split(self.kv_heads as u64, g, "head groups").map_err(err)?;
        }
        Ok(())
    }
}

/// Which unit options an executor honours. [`UnitSupport::check`] refuses, in one line naming
/// the option, a unit it cannot run as specified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnitSupport {
    /// Runs the backward pass (otherwise forward only).
    pub backward: bool,
    /// Micro-batches larger than 1.
    pub micro_batches: bool,
    /// Causal masking.
    pub causal: bool,
    /// Unfused attention (scores materialised).
    pub unfused: bool,
    /// Fused attention.
    pub fused: bool,
    /// Receive buffer counts it implements.
    pub recv_buffers: &'static [u64],
    /// Weight exchanges it implements.
    pub weight_exchanges: &'static [WeightExchange],
    /// Head groups other than p.
    pub head_groups: bool,
    /// Q, K, V stored for backward.
    pub store_qkv: bool,
    /// The MLP activation input stored for backward.
    pub store_mlp_act: bool,
    /// Fewer K/V heads than query heads (grouped-query attention).
    pub grouped_kv: bool,
    /// Activations it implements.
    pub activations: &'static [Activation],
}

impl UnitSupport {
    /// Every option a [`UnitSpec`] can state.
    pub const ALL: UnitSupport = UnitSupport {
        backward: true,
        micro_batches: true,
        causal: true,
        unfused: true,
        fused: true,
        recv_buffers: &[1, 2],
        weight_exchanges: &[WeightExchange::Ring, WeightExchange::Broadcast],
        head_groups: true,
        store_qkv: true,
        store_mlp_act: true,
        grouped_kv: true,
        activations: &[Activation::Gelu, Activation::Swiglu],
    };

    /// `Err` naming the first option of `spec` that `executor` does not honour.
    pub fn check(&self, executor: &str, spec: &UnitSpec) -> Result<()> {
        let attention = spec.unit == Unit::Attention;
        let metp = spec.method == ExecMethod::Metp;
        let refused = if spec.shape.b > 1 && !self.micro_batches {
            Some(format!("micro-batch {} (only 1)", spec.shape.b))
        } else if attention && spec.causal && !self.causal {
            Some("causal attention".to_string())
        } else if attention && !spec.fused && !self.unfused {
            Some("unfused attention (--no-flash)".to_string())
        } else if attention && spec.fused && !self.fused {
            Some("fused attention (use --no-flash)".to_string())
        } else if metp && !self.recv_buffers.contains(&spec.metp.recv_buffers) {
            Some(format!(
                "{} receive buffer(s) (--metp-recv-buffers)",
                spec.metp.recv_buffers
            ))
        } else if metp && attention && !self.weight_exchanges.contains(&spec.metp.weight_exchange) {
            Some(format!(
                "weight exchange '{}' (--metp-weight-exchange)",
                spec.metp.weight_exchange.id()
            ))
        } else if metp
            && attention
            && spec.head_groups() != spec.shape.p as u64
            && !self.head_groups
        {
            Some(format!("{} head groups (only p)", spec.head_groups()))
        } else if metp && attention && spec.metp.store_qkv && !self.store_qkv {
            Some("stored Q, K, V (--metp-store-qkv)".to_string())
        } else if metp && !attention && spec.metp.store_mlp_act && !self.store_mlp_act {
            Some("a stored MLP activation input (--metp-store-mlp-act)".to_string())
        } else if attention && spec.kv_heads != spec.shape.a && !self.grouped_kv {
            Some(format!(
                "{} K/V heads for {} query heads (grouped-query attention)",
                spec.kv_heads, spec.shape.a
            ))
        } else if !attention && !self.activations.contains(&spec.activation) {
            Some(format!("the {:?} activation", spec.activation))
        } else {
            None
        };
        match refused {
            Some(what) => Err(Error::InvalidConfig {
                method: spec.method.id().to_string(),
                p: spec.shape.p as u64,
                message: format!("the {executor} backend cannot run {what}"),
            }),
            None => Ok(()),
        }
    }
}
