//! How much of a step the simulator runs ([`SimDepth`]), and the fast path.
//!
//! - [`SimDepth::Full`]: every layer and micro-batch, the reference.
//! - [`SimDepth::Periodic`] (the default of `simulate`, `sweep`, `validate`): a copy with fewer
//!   layers (no pipeline) or fewer steady pipeline rounds, where the engine proves the rest
//!   repeats it exactly (`sim::simulate_shortened`): the same numbers as [`SimDepth::Full`],
//!   to the picosecond; the whole step where nothing is proven.
//! - [`SimDepth::Extrapolate`] (the fast path: `plan`, `simulate --extrapolate`): the exact
//!   path when what it would simulate is at most [`FAST_EXACT_TASKS`] tasks; otherwise the step
//!   composed from its distinct op programs (`sim::simulate_composed`: each forward and backward
//!   program of a stage simulated once, the 1F1B orders walked with them), within 1–3% of
//!   the whole simulation (`tests/it/compose.rs`), in milliseconds where the whole step is
//!   millions of tasks. Nothing is extrapolated that was not proven, except a composed
//!   program's layers when their period is not found and the program is large (affine in the
//!   layers, from two shorter runs; the composition says how many).

use serde::Serialize;

use crate::config::ValidWorkload;
use crate::schedule::{self, Devices, StepPlan};
use crate::sim;

/// How much of the model the simulator runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SimDepth {
    /// Every layer and micro-batch.
    Full,
    /// A copy with fewer layers (no pipeline) or steady pipeline rounds, where the simulator
    /// proves the rest repeats exactly (`sim::simulate_shortened`): the same numbers as
    /// [`SimDepth::Full`], to the picosecond; the whole step where nothing is proven.
    Periodic,
    /// The fast path (module docs): exact where that is cheap, else composed from the step's
    /// distinct op programs.
    #[default]
    Extrapolate,
}

/// The most tasks the fast path simulates exactly before it composes instead.
pub const FAST_EXACT_TASKS: u64 = 300_000;

/// What the fast path does for a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FastPath {
    /// Shorten exactly (or simulate whole): small enough.
    Exact,
    /// Compose from the distinct op programs.
    Composed,
}

/// Whether the fast path simulates `w` exactly or composes it: exactly when the shortened copy
/// (or, with nothing to shorten, the whole step) is at most [`FAST_EXACT_TASKS`] tasks, or
/// when the software's schedule options are not the default (`config::Runtime::composable`).
pub fn fast_path(w: &ValidWorkload, plan: &StepPlan, devices: Devices) -> FastPath {
    // The composition walks Megatron's order with overlapped exchanges and synchronisation;
    // another schedule (`config::runtime`) is simulated exactly (shortened where proven).
    if !w.options.runtime.composable() {
        return FastPath::Exact;
    }
    let tasks = match sim::shortening(w) {
        Some((short, ..)) => schedule::graph_size(&short, plan, devices).tasks,
        None => schedule::graph_size(w, plan, devices).tasks,
    };
    if tasks <= FAST_EXACT_TASKS {
        FastPath::Exact
    } else {
        FastPath::Composed
    }
}

/// Whether the whole step of `w` is small enough for the fast path to simulate it whole when
/// the shortened copy is not proven periodic.
pub fn whole_is_cheap(w: &ValidWorkload, plan: &StepPlan, devices: Devices) -> bool {
    schedule::graph_size(w, plan, devices).tasks <= FAST_EXACT_TASKS
}
