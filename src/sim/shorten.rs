//! A step simulated short where it repeats: a copy of the workload with fewer layers (no
//! pipeline) or fewer steady pipeline rounds runs through the simulator with its repeating
//! rounds declared ([`Rounds`]); where the engine proves them periodic ([`PeriodProof`]: the
//! whole simulated state at the start of a round equals its state a round earlier, read one
//! round later), the step with all its layers or micro-batches is that run with whole periods
//! inserted — the same numbers, to the picosecond, as simulating every layer and micro-batch
//! ([`crate::evaluate::SimDepth::Full`]; tested). When a run of rounds is not proven (the
//! rounds never settle into a period, say because gradient synchronisations fall ever further
//! behind the backward), nothing is extrapolated: the caller simulates the whole step.
//!
//! - **Layers** (one pipeline stage): every forward and every backward run of layers is a run
//!   of rounds, one layer each. The copy has [`SHORT_LAYERS`] layers; the memory inventories,
//!   the step plan and so the optimizer are the whole model's.
//! - **Micro-batches** (a pipeline): each stage's steady 1F1B pairs, in rounds of one pair (pp
//!   · v pairs, a group of pp micro-batches, when interleaved), one segment per stage
//!   ([`crate::config::steady_rounds`]). The copy keeps the warm-up and the cool-down and
//!   enough steady rounds on every stage for the proof ([`SHORT_ROUNDS`]); layers are never
//!   shortened here, as every stage's timing depends on every other's.

use serde::Serialize;

use super::workload::{reserve, workload_sim};
use super::{simulate, LinkModel, SimOptions, TraceScope, WorkloadSim};
use crate::config::{steady_rounds, ValidWorkload};
use crate::error::Result;
use crate::memory::Inventory;
use crate::schedule::{self, Devices, LowerOptions, Rounds, StepPlan};

/// Layers the shortened copy of an unpipelined step has (one more when that leaves an odd
/// number out): rounds 2 and later can be compared (round 1 still depends on what preceded the
/// run), leaving pairs to find the period in. The rounds left out are kept even, so that a
/// period of two rounds can stand for them too (`sim::engine`'s recurrence monitor).
pub const SHORT_LAYERS: u64 = 6;

/// The layers a shortened copy of a run of `layers` has: [`SHORT_LAYERS`] rounds plus the
/// run's `tail` (the layers after its last round: [`run_tail`]), one more where that would
/// leave an odd number out (a run of no more layers is not shortened).
pub(crate) fn short_layers(layers: u64, tail: u64) -> u64 {
    let short = SHORT_LAYERS + tail;
    short + (layers.saturating_sub(short) % 2)
}

/// Layers at the end of each run of layers that its declared rounds leave out: under ZeRO-3
/// (and in the first forward when the updated weights are gathered then,
/// `config::ParamGather::Overlapped`) the last layer gathers no next layer's weights
/// (`schedule::lower::sync`), so its tasks are not the other layers' shape and it closes the
/// run instead of repeating it.
pub(crate) fn run_tail(w: &ValidWorkload) -> u64 {
    let overlapped = w.options.runtime.param_gather == crate::config::ParamGather::Overlapped;
    u64::from(w.gathers_layer_weights() || overlapped)
}

/// Steady rounds every stage of a shortened pipelined copy has, at least.
pub const SHORT_ROUNDS: u32 = 8;

/// What a shortened simulation left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "axis")]
pub enum Shortened {
    /// Layers: `simulated` of `layers` in every forward and backward run.
    Layers {
        /// Layers simulated.
        simulated: u64,
        /// The model's.
        layers: u64,
    },
    /// Micro-batches: `simulated` of `micro_batches` per replica.
    MicroBatches {
        /// Micro-batches simulated.
        simulated: u64,
        /// The step's.
        micro_batches: u64,
    },
}

impl Shortened {
    /// `6 of 32 layers simulated` / `70 of 512 micro-batches simulated`.
    pub fn describe(&self) -> String {
        match *self {
            Shortened::Layers { simulated, layers } => {
                format!("{simulated} of {layers} layers simulated")
            }
            Shortened::MicroBatches {
                simulated,
                micro_batches,
            } => format!("{simulated} of {micro_batches} micro-batches simulated"),
        }
    }
}

/// The shortened copy of `w` to simulate: the copy, what its lowering declares, how many
/// rounds each declared run lacks, and what was shortened; `None` when nothing repeats enough
/// to leave out.
pub fn shortening(w: &ValidWorkload) -> Option<(ValidWorkload, Rounds, u64, Shortened)> {
    if w.outer.pp == 1 {
        // A synchronisation after the whole backward (`config::runtime`) runs once per layer of
        // the model after the layer rounds: a copy with fewer layers would leave some out.
        if w.options.runtime.grad_sync == crate::config::GradSync::AfterBackward {
            return None;
        }
        let layers = w.model.layers;
        let simulated = short_layers(layers, run_tail(w));
        if layers <= simulated {
            return None;
        }
        let mut v = w.clone().into_workload();
        v.model.layers = simulated;
        let short = v.validate().ok()?;
        return Some((
            short,
            Rounds::Layers,
            layers - simulated,
            Shortened::Layers { simulated, layers },
        ));
    }
    let (pp, v, m) = (
        w.outer.pp as u32,
        w.outer.interleave as u32,
        u32::try_from(w.micro_batches).ok()?,
    );
    // Micro-batches come in groups of pp when interleaved (Megatron's rule), or of the
    // flexible schedule's rounds (`config::runtime`).
    let round = w
        .options
        .runtime
        .pp_round
        .and_then(|r| u32::try_from(r).ok());
    let step = if v > 1 { round.unwrap_or(pp) } else { 1 };
    let min_rounds = |mb: u32| {
        (0..pp)
            .map(|s| steady_rounds(pp, v, mb, round, s).rounds)
            .min()
    };
    let mut short = pp.max(step);
    while short < m && min_rounds(short).unwrap_or(0) < SHORT_ROUNDS {
        short += step;
    }
    // An even number of rounds left out (see SHORT_LAYERS).
    let per_round = step;
    if ((m.saturating_sub(short)) / per_round) % 2 == 1 {
        short += step;
    }
    if short >= m {
        return None;
    }
    // Every stage must lack the same number of rounds (the copy is the step with whole rounds
    // left out of each stage's steady part).
    let lacks: Vec<u32> = (0..pp)
        .map(|s| {
            steady_rounds(pp, v, m, round, s)
                .rounds
                .saturating_sub(steady_rounds(pp, v, short, round, s).rounds)
        })
        .collect();
    let insert = lacks[0];
    if insert == 0 || lacks.iter().any(|&n| n != insert) || insert * per_round != m - short {
        return None;
    }
    let mut c = w.clone().into_workload();
    c.micro_batches = u64::from(short);
    let copy = c.validate().ok()?;
    Some((
        copy,
        Rounds::MicroBatches,
        u64::from(insert),
        Shortened::MicroBatches {
            simulated: u64::from(short),
            micro_batches: u64::from(m),
        },
    ))
}

/// Simulates `w`'s step from a shortened copy (module docs): `Ok(None)` when there is nothing
/// to shorten or a run of rounds was not proven periodic — then only a whole simulation gives
/// the step.
pub fn simulate_shortened(
    w: &ValidWorkload,
    plan: &StepPlan,
    stages: &[Inventory],
    link: LinkModel,
    devices: Devices,
) -> Result<Option<WorkloadSim>> {
    let Some((short, rounds, insert, what)) = shortening(w) else {
        return Ok(None);
    };
    let size = schedule::graph_size(&short, plan, devices);
    let _memory = reserve(&short, &size, TraceScope::Off, None)?;
    let mut graph = schedule::lower(
        &short,
        plan,
        stages,
        LowerOptions {
            devices,
            rounds,
            ..LowerOptions::step()
        },
    );
    // Every run the copy lacks rounds of must be declared, whole.
    let expected = match rounds {
        Rounds::Layers => 2 * short.micro_batches as usize,
        _ => 1,
    };
    if graph.periodic.len() != expected {
        return Ok(None);
    }
    for p in &mut graph.periodic {
        p.insert = insert;
    }
    let result = simulate(
        &graph,
        &w.hardware,
        link,
        SimOptions {
            periodic: true,
            ..SimOptions::default()
        },
    )?;
    let proven = result.periodic.len() == expected && result.periodic.iter().all(Option::is_some);
    if !proven {
        return Ok(None);
    }
    let sim = workload_sim(w, &graph, result, None, Some(what));
    // Freeing a graph of half a million tasks takes a noticeable share of the call: it is
    // handed to the thread pool, off the caller's path (nothing reads it again).
    rayon::spawn(move || drop(graph));
    Ok(Some(sim))
}
