//! One workload, evaluated once: the path every study takes from a validated workload to the
//! numbers it reports.
//!
//! ```text
//! ValidWorkload ─▶ memory::inventory ─▶ schedule::plan ─▶ analytic::price ─▶ estimate
//!                         │                   │
//!                         └──────┬────────────┘
//!                                ▼
//!                  sim::simulate_plan (optional) ─▶ simulation
//!                                                     │
//!                              Metrics::new ◀─────────┘ (or the estimate)
//! ```
//!
//! An [`Evaluation`] holds the workload, its [`Inventory`], its [`StepPlan`], the closed-form
//! estimate, the simulation when one was asked for, and the [`Metrics`] — tokens/s, MFU,
//! exposed share, overlap efficiency, peak, capacity and whether it fits — computed in one
//! place from whichever times are authoritative (the simulation's, else the estimate's). The
//! inventory and the plan are built once and passed down by reference; nothing below builds
//! them again (`memory::inventories_built` and `schedule::plans_built` let a test count).
//!
//! ```
//! use metp_sim::config::{load_hardware, load_model, MethodId, Options, Workload};
//! use metp_sim::evaluate::{Evaluation, SimulateOptions};
//! use metp_sim::sim::LinkModel;
//!
//! let mut model = load_model("llama2-7b")?;
//! model.layers = 2; // every layer is the same work; two keep the example fast
//! let w = Workload {
//!     model,
//!     hardware: load_hardware("dgx-a100-80gb")?,
//!     method: MethodId::Metp,
//!     p: 8,
//!     dp: 1,
//!     outer: metp_sim::config::OuterAxes::default(),
//!     seq: 16384,
//!     micro_batch: 1,
//!     micro_batches: 1,
//!     options: Options::default(),
//! }
//! .validate()?;
//! let e = Evaluation::new(w).simulate(SimulateOptions::full(LinkModel::Ideal))?;
//! // With ideal links the simulator and the closed form agree within 1% (DESIGN §3).
//! assert!((e.metrics.step_time_s / e.estimate.step_time_s - 1.0).abs() < 0.01);
//! assert!(e.metrics.fits && e.metrics.mfu > 0.0 && e.metrics.mfu < 1.0);
//! # Ok::<(), metp_sim::Error>(())
//! ```
//!
//! `simulate`, `sweep`, `plan` and `validate` all evaluate through this module. Depends on
//! `config`, `memory`, `schedule`, `analytic`, `sim` and `error`; never on the studies above it
//! (`sweep`, `validate`, `plan`) or `cli`.

mod extrapolate;
mod metrics;
mod reported;

pub use crate::schedule::Devices;
pub use extrapolate::{fast_path, whole_is_cheap, FastPath, SimDepth, FAST_EXACT_TASKS};
pub use metrics::{
    mfu_convention, mfu_convention_with, model_flops, step_flops, AttentionFlops, FlopConvention,
    Metrics, Training,
};
pub use reported::{check_reported, check_reported_memory, Reported, REPORTED_TOLERANCE};

use crate::analytic;
use crate::config::ValidWorkload;
use crate::error::Result;
use crate::memory::{self, Inventory};
use crate::schedule::{self, StepPlan, StepTimes};
use crate::sim::{self, LinkModel, TraceScope, WorkloadSim};

/// What one step of a collective over the data-parallel replicas (ZeRO-3's gathers, the
/// gradients' reduce-scatter) costs the simulator, in tasks, for [`Evaluation::simulation_cost`]:
/// each is one task but moves a transfer per simulated device and step, and the max-min links
/// re-share at each. Fitted, not derived: on the 30 composed and shortened simulations of
/// `plan --model llama3-405b --hw dgx-h100 --gpus 16384 --seq 128k --global-batch 128 --causal
/// --methods ring`, timed one by one on one thread (0.43–11.3 s each, 74 s in all), the cost
/// with it correlates with the measured time at Pearson 0.984 and Spearman 0.972 (tasks alone:
/// 0.985 and 0.964; a weight of 32 gave 0.964 and 0.938). The weight was 32 while every step of
/// such a ring ran alone (0.5–54 s each); since the simulator runs at most
/// `sim::network::COLLECTIVE_STEPS` of them a phase, they weigh little.
pub const REPLICA_STEP_TASKS: u64 = 2;

/// What a planner screens a configuration with before pricing it in closed form.
#[derive(Debug, Clone, PartialEq)]
pub struct Screen {
    /// A lower bound on the closed-form step time, from no walk of a pipeline's orders
    /// (`analytic::step_lower_bound`).
    pub step_lower_bound_s: f64,
    /// The bits of the prices the closed form composes: two configurations of one layout with
    /// equal fingerprints have the same closed-form step (`analytic::parts_fingerprint`).
    pub fingerprint: Vec<u64>,
}

/// The [`Screen`] of `w`.
pub fn screen(w: &ValidWorkload) -> Screen {
    let plan = schedule::plan(w);
    let (step_lower_bound_s, fingerprint) = analytic::screen(w, &plan);
    Screen {
        step_lower_bound_s,
        fingerprint,
    }
}

/// How a study obtains step times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Timing {
    /// The discrete-event simulator with this link model (the closed-form estimate is kept
    /// beside it).
    Simulated(LinkModel),
    /// The closed-form model only.
    Analytic,
}

/// How to simulate a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimulateOptions {
    /// Link model.
    pub link: LinkModel,
    /// The whole model, or extrapolated from shortened copies ([`SimDepth`]).
    pub depth: SimDepth,
    /// Which spans to record (whole-model simulations only).
    pub trace: TraceScope,
    /// One simulated device per distinct program (the default), or every device (to check
    /// the reduction).
    pub devices: Devices,
}

impl SimulateOptions {
    /// The whole step with `link`, no trace: simulated short where the simulator proves the rest
    /// repeats it ([`SimDepth::Periodic`], the same numbers as every layer simulated).
    pub fn full(link: LinkModel) -> SimulateOptions {
        SimulateOptions {
            link,
            depth: SimDepth::Periodic,
            trace: TraceScope::Off,
            devices: Devices::Distinct,
        }
    }
}

/// A simulated step.
#[derive(Debug, Clone)]
pub struct Simulation {
    /// Link model.
    pub link: LinkModel,
    /// How the step was simulated: [`SimDepth::Full`] (every layer and micro-batch),
    /// [`SimDepth::Periodic`] (a shortened copy, the rest proven to repeat it; `run` says what
    /// was left out) or [`SimDepth::Extrapolate`] (composed from its distinct op programs;
    /// `run.composed` says how many).
    pub depth: SimDepth,
    /// The step's times on the critical device.
    pub times: StepTimes,
    /// The step as simulated — per-device statistics, memory high-water marks, the trace when
    /// the whole step ran.
    pub run: Option<WorkloadSim>,
}

/// One workload, evaluated (module docs).
#[derive(Debug, Clone)]
pub struct Evaluation {
    /// The workload.
    pub workload: ValidWorkload,
    /// The memory inventory of the device with the highest peak (the only one without a
    /// pipeline); it decides whether the configuration fits.
    pub inventory: Inventory,
    /// One memory inventory per pipeline stage.
    pub stages: Vec<Inventory>,
    /// Its step plan.
    pub plan: StepPlan,
    /// The closed-form times of the plan.
    pub estimate: StepTimes,
    /// The simulated step, when one was asked for.
    pub simulation: Option<Simulation>,
    /// Metrics of the simulation when there is one, else of the estimate.
    pub metrics: Metrics,
}

impl Evaluation {
    /// Inventories, plan and closed-form estimate of `workload`.
    pub fn new(workload: ValidWorkload) -> Evaluation {
        let stages = memory::stage_inventories(&workload);
        Evaluation::with_stages(workload, stages)
    }

    /// The same, from the workload's stage inventories already built (a study that first
    /// checks whether a configuration fits passes them on instead of building them again).
    pub fn with_stages(workload: ValidWorkload, stages: Vec<Inventory>) -> Evaluation {
        let plan = schedule::plan(&workload);
        let estimate = analytic::price(&workload, &plan);
        let inventory = stages[memory::critical_stage(&stages)].clone();
        let metrics = Metrics::new(&workload, &estimate, &inventory);
        Evaluation {
            workload,
            inventory,
            stages,
            plan,
            estimate,
            simulation: None,
            metrics,
        }
    }

    /// Evaluates `workload` with step times from `timing`.
    pub fn timed(workload: ValidWorkload, timing: Timing) -> Result<Evaluation> {
        let e = Evaluation::new(workload);
        match timing {
            Timing::Analytic => Ok(e),
            Timing::Simulated(link) => e.simulate(SimulateOptions::full(link)),
        }
    }

    /// Simulates the step (the plan and inventory built once are reused for a whole-model
    /// simulation) and takes the metrics from the simulation.
    pub fn simulate(mut self, opts: SimulateOptions) -> Result<Evaluation> {
        // A step the closed form already puts beyond the simulator's clock (or at an
        // impossible MFU) is refused before it is simulated.
        self.analytic_metrics().check("closed-form")?;
        let w = &self.workload;
        let whole = |w: &ValidWorkload| -> Result<Simulation> {
            let run = sim::simulate_plan(
                w,
                &self.plan,
                &self.stages,
                opts.link,
                opts.trace,
                opts.devices,
            )?;
            Ok(Simulation {
                link: opts.link,
                depth: SimDepth::Full,
                times: run.times(),
                run: Some(run),
            })
        };
        let shortened = || -> Result<Option<Simulation>> {
            Ok(
                sim::simulate_shortened(w, &self.plan, &self.stages, opts.link, opts.devices)?.map(
                    |run| Simulation {
                        link: opts.link,
                        depth: SimDepth::Periodic,
                        times: run.times(),
                        run: Some(run),
                    },
                ),
            )
        };
        let composed = || -> Result<Simulation> {
            let run = sim::simulate_composed(w, &self.plan, &self.stages, opts.link, opts.devices)?;
            Ok(Simulation {
                link: opts.link,
                depth: SimDepth::Extrapolate,
                times: run.times(),
                run: Some(run),
            })
        };
        let simulation = match opts.depth {
            // A trace records every task: only a whole simulation has them.
            SimDepth::Full => whole(w)?,
            _ if opts.trace.on() => whole(w)?,
            SimDepth::Periodic => match shortened()? {
                Some(s) => s,
                None => whole(w)?,
            },
            SimDepth::Extrapolate => match fast_path(w, &self.plan, opts.devices) {
                FastPath::Exact => match shortened()? {
                    Some(s) => s,
                    // The composition walks the default schedule only: another one is
                    // simulated whole however large (the simulator's task guard bounds it).
                    None if whole_is_cheap(w, &self.plan, opts.devices)
                        || !w.options.runtime.composable() =>
                    {
                        whole(w)?
                    }
                    None => composed()?,
                },
                FastPath::Composed => composed()?,
            },
        };
        let metrics = Metrics::new(w, &simulation.times, &self.inventory);
        metrics.check("simulated")?;
        self.metrics = metrics;
        self.simulation = Some(simulation);
        Ok(self)
    }

    /// What [`Evaluation::simulate`] with `opts` will cost, in tasks, estimated from the plan
    /// before anything is lowered: the tasks of what the chosen path lowers
    /// (`schedule::graph_size` of the whole step or its shortened copy, or the composition's
    /// distinct programs, `sim::composed_size`), plus [`REPLICA_STEP_TASKS`] for each step of
    /// a composed program's collectives over the replicas. A planner runs its costliest
    /// simulations first and weighs its progress by it; it orders work and never enters a
    /// result. Where the path is only decided by simulating (a shortened copy not proven
    /// periodic falls back to the whole step or the composition), the shortened copy's tasks
    /// are the estimate.
    pub fn simulation_cost(&self, opts: SimulateOptions) -> u64 {
        let (w, plan, devices) = (&self.workload, &self.plan, opts.devices);
        let whole = || schedule::graph_size(w, plan, devices).tasks;
        let shortened = || {
            sim::shortening(w).map_or_else(whole, |(short, ..)| {
                schedule::graph_size(&short, plan, devices).tasks
            })
        };
        match opts.depth {
            SimDepth::Full => whole(),
            _ if opts.trace.on() => whole(),
            SimDepth::Periodic => shortened(),
            SimDepth::Extrapolate => match fast_path(w, plan, devices) {
                FastPath::Exact => shortened(),
                FastPath::Composed => {
                    let size = sim::composed_size(w, plan, devices);
                    size.tasks
                        .saturating_add(size.replica_steps.saturating_mul(REPLICA_STEP_TASKS))
                }
            },
        }
    }

    /// `Err` unless the metrics (and the closed-form estimate's) are numbers the tool may
    /// report ([`Metrics::check`]): every study checks before it reports.
    pub fn check(&self) -> Result<()> {
        self.analytic_metrics().check("closed-form")?;
        self.metrics.check(if self.simulation.is_some() {
            "simulated"
        } else {
            "closed-form"
        })
    }

    /// The metrics of the closed-form estimate (the same as [`Evaluation::metrics`] when
    /// nothing was simulated).
    pub fn analytic_metrics(&self) -> Metrics {
        Metrics::new(&self.workload, &self.estimate, &self.inventory)
    }
}
