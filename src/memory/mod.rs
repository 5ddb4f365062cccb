//! Per-device memory: the tensor inventory of every method, and the peak it implies.
//!
//! Input: a [`Workload`]. Output: an [`Inventory`] — every static (weights, gradients, optimizer
//! state), stored (activations kept for backward) and transient (working sets, communication
//! buffers) tensor one device holds, with its block, kind, bytes and whether all p devices hold
//! the same copy — and the peak per device:
//!
//! ```text
//! peak = static + stored activations of all layers (+ embedding / head inputs)
//!      + the largest transient working set (the phase whose transients add up highest)
//!      + reserved (CUDA context, NCCL, allocator headroom)
//! ```
//!
//! The inventory is the single source of memory truth: the simulator's alloc/free events and the
//! executed backends' measured high-water marks are checked against it. One file per method
//! builds its tensors; `layer` holds the Korthikanti et al. tensor template the baselines share,
//! `params` the weight/gradient/optimizer state. Depends on `config` and `error` only.

mod inventory;
mod layer;
mod metp;
mod params;
mod ring;
mod rsa;
mod tp;
mod tp_sp;
mod ulysses;
pub mod unit;

pub use inventory::{inventory, Block, Inventory, Kind, Phase, Tensor};
pub use unit::{phase_peaks, unit_inventory, Moment, Unit, UnitInventory, UnitShape, UnitSpec};

use crate::config::{Dims, MethodId, Model, Options, Workload};

/// What each method's memory file provides.
pub trait MethodMemory: Sync {
    /// Degree-dependent constraints that do not depend on the sequence length (heads, hidden
    /// and MLP widths divisible by p, …). `Err` carries the reason.
    fn check_degree(&self, model: &Model, p: u64, options: &Options) -> Result<(), String>;
    /// Sequence lengths must be a multiple of this.
    fn seq_multiple(&self, model: &Model, p: u64, options: &Options) -> u64;
    /// The activation and working-set tensors of one device (weights and optimizer state are
    /// added by the caller from `params`).
    fn activation_tensors(&self, w: &Workload, d: &Dims<u128>) -> Vec<Tensor>;
    /// Remarks worth printing with the inventory (assumptions, ignored options).
    fn notes(&self, _w: &Workload) -> Vec<String> {
        Vec::new()
    }
}

/// The memory model of a method.
pub fn method_memory(id: MethodId) -> &'static dyn MethodMemory {
    match id {
        MethodId::Metp => &metp::Metp,
        MethodId::Tp => &tp::Tp,
        MethodId::TpSp => &tp_sp::TpSp,
        MethodId::Ulysses => &ulysses::Ulysses,
        MethodId::Ring => &ring::Ring,
        MethodId::Rsa => &rsa::Rsa,
    }
}

/// Checks that `p` is usable for `method` with this model, independent of the sequence.
pub fn check_degree(
    method: MethodId,
    model: &Model,
    p: u64,
    options: &Options,
) -> Result<(), String> {
    if p == 0 {
        return Err("degree must be positive".into());
    }
    method_memory(method).check_degree(model, p, options)
}

/// The multiple every sequence length must be for `method` at degree `p`.
pub fn seq_multiple(method: MethodId, model: &Model, p: u64, options: &Options) -> u64 {
    method_memory(method).seq_multiple(model, p, options)
}

/// Sequence granule of the K/V rings (ring attention, METP): p blocks, or 2p chunks when causal
/// attention is load-balanced zig-zag.
pub(crate) fn ring_seq_multiple(p: u64, options: &Options) -> u64 {
    if options.causal && options.causal_zigzag {
        2 * p
    } else {
        p
    }
}

/// Parameters one device holds after its method's sharding and ZeRO (what its optimizer
/// updates), and the parameters of one layer before any sharding.
pub fn optimizer_params(w: &Workload) -> (u128, u128) {
    let local: u128 = params::local_params(w).iter().map(|&(_, n, _)| n).sum();
    let sharded = if w.zero_stage() >= crate::config::ZeroStage::Zero1 {
        local.div_ceil(params::zero_group(w))
    } else {
        local
    };
    let m = &w.model;
    let layer =
        (m.attention_params_per_layer() + m.mlp_params_per_layer() + 2 * m.norm_params()) as u128;
    (sharded, layer)
}

/// `Err` with a reason unless `n` is divisible by `p`.
pub(crate) fn divisible(what: &str, n: u64, p: u64) -> Result<(), String> {
    if n.is_multiple_of(p) {
        Ok(())
    } else {
        Err(format!("{what} ({n}) is not divisible by p = {p}"))
    }
}
