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
//! `params` the weight/gradient/optimizer state. Depends on `config` and `error` only;
//! never on `schedule`, `cost` or `sim`.

mod in_flight;
mod inventory;
mod layer;
mod metp;
pub mod names;
mod params;
mod ring;
mod rsa;
mod tp;
mod tp_sp;
mod ulysses;
pub mod unit;

pub use inventory::{
    critical_stage, inventories_built, inventory, stage_inventories, Block, Inventory, Kind, Phase,
    Tensor,
};
pub use params::{GradLifetime, HeldGrads, StageShare};
pub use unit::{phase_peaks, unit_inventory, Moment, Unit, UnitInventory, UnitShape, UnitSpec};

use crate::config::{Dims, MethodId, Workload};

/// What each method's memory file provides.
pub trait MethodMemory: Sync {
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

/// Parameters one device of pipeline stage `stage` holds after its method's sharding and ZeRO
/// (what its optimizer updates), and the parameters of one layer before any sharding.
pub fn optimizer_params(w: &crate::config::ValidWorkload, stage: u32) -> (u128, u128) {
    let share = stage_share(w, stage);
    let local: u128 = params::local_params(w, &share)
        .iter()
        .map(|&(_, n, _)| n)
        .sum();
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

/// What stage `stage` of a validated workload holds (the whole model without a pipeline).
pub fn stage_share(w: &crate::config::ValidWorkload, stage: u32) -> StageShare {
    StageShare {
        layers: w.stage_layers(stage),
        embedding: w.has_embedding(stage),
        head: w.has_head(stage),
        pipelined: w.outer.pp > 1,
    }
}
