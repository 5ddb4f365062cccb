//! A workload's step plan through the simulator: lowered with its stages' memory inventories
//! over the workload's devices (one per distinct program by default), then simulated.
//!
//! Before anything is built, the size of the graph the lowering will build
//! ([`schedule::graph_size`], from the workload and plan alone) is checked against the tool's
//! limits (`config::limits`): at most `MAX_GRAPH_TASKS` tasks, and the memory the graph, the
//! engine and a trace will hold set aside from the process's budget ([`limits::reserve_memory`])
//! — so a step too large for the machine is refused in one line that says what to change,
//! instead of aborting in the allocator, and concurrent simulations (sweep, plan) share the
//! memory.

use serde::Serialize;

use super::shorten::Shortened;
use super::{simulate, DeviceStats, LinkModel, SimOptions, SimResult};
use crate::config::limits;
use crate::config::{Coord, ValidWorkload};
use crate::error::{Error, Result};
use crate::memory::Inventory;
use crate::schedule::{self, Devices, GraphSize, LowerOptions, StepPlan, StepTimes};

/// Bytes the engine holds per task beside the graph: its per-task state (32), the flattened
/// dependents and dependencies (8), start times (8), stream order (4) and the event queue's
/// entries, rounded up; with [`schedule::GRAPH_BYTES_PER_TASK`] this bounds the ~250 bytes per
/// task measured as peak resident memory of whole `simulate` runs (README "Limits").
pub const ENGINE_BYTES_PER_TASK: u64 = 128;

/// Bytes a trace adds per recorded task: its span and the link spans of its messages (~1.5
/// spans of 72 bytes), and the Chrome trace JSON written from them (~220 bytes per span, with
/// the events serde builds on the way), rounded up from the ~430 bytes per task measured.
pub const TRACE_BYTES_PER_TASK: u64 = 600;

/// Which spans a simulation records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TraceScope {
    /// None.
    #[default]
    Off,
    /// Every device while the trace is small, device 0 alone (a representative device: each
    /// method treats its devices alike) once all devices would record more than
    /// `limits::TRACE_ALL_DEVICES_MAX_SPANS` spans.
    Auto,
    /// Every device, however large.
    AllDevices,
}

impl TraceScope {
    /// Whether anything is recorded.
    pub fn on(self) -> bool {
        self != TraceScope::Off
    }
}

/// The outcome of simulating a workload's step.
#[derive(Debug, Clone)]
pub struct WorkloadSim {
    /// The simulator's result.
    pub result: SimResult,
    /// Devices simulated.
    pub devices: u32,
    /// Devices of the cluster they stand for (p · cp · dp · pp).
    pub cluster_devices: u32,
    /// Coordinates of each simulated device.
    pub coords: Vec<Coord>,
    /// How many cluster devices each simulated device stands for.
    pub stands_for: Vec<u32>,
    /// The one device the trace records, when it records one ([`TraceScope::Auto`] on a large
    /// step); `None`: every device, or no trace.
    pub trace_device: Option<u32>,
    /// When a shortened copy of the step ran and the rest was proven to repeat it
    /// ([`super::simulate_shortened`]): what was shortened.
    pub shortened: Option<Shortened>,
    /// When the step was composed from its distinct programs ([`super::simulate_composed`]):
    /// how many ran.
    pub composed: Option<super::Composition>,
}

/// One pipeline stage of a simulated step, on its busiest simulated device.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StageTimes {
    /// Stage.
    pub stage: u32,
    /// Wall time with a kernel running.
    pub compute_s: f64,
    /// Communication time (in flight, overlapped or not).
    pub communication_s: f64,
    /// Communication the compute stream waited for.
    pub exposed_communication_s: f64,
    /// Idle time: neither computing nor waiting on its own communication (the pipeline
    /// bubble, and waiting for other stages): step − compute − exposed.
    pub bubble_s: f64,
    /// The memory high-water mark of the lowered graph's alloc/free tasks.
    pub memory_high_water_bytes: u128,
}

impl WorkloadSim {
    /// The critical device: the one that computes longest (it sets the step's pace); ties go to
    /// the lower device id.
    pub fn critical(&self) -> &DeviceStats {
        let mut best = &self.result.devices[0];
        for d in &self.result.devices[1..] {
            if d.compute_busy_s > best.compute_busy_s {
                best = d;
            }
        }
        best
    }

    /// The step's times on the critical device.
    pub fn times(&self) -> StepTimes {
        let c = self.critical();
        StepTimes {
            step_time_s: self.result.step_time_s,
            compute_s: c.compute_busy_s,
            communication_s: c.comm_busy_s,
            exposed_communication_s: c.exposed_comm_s,
        }
    }

    /// Per pipeline stage, its busiest simulated device's times.
    pub fn stages(&self) -> Vec<StageTimes> {
        let stages = self.coords.iter().map(|c| c.stage + 1).max().unwrap_or(1);
        (0..stages)
            .filter_map(|s| {
                let d = (0..self.coords.len())
                    .filter(|&i| self.coords[i].stage == s)
                    .max_by(|&a, &b| {
                        let (x, y) = (&self.result.devices[a], &self.result.devices[b]);
                        x.compute_busy_s
                            .total_cmp(&y.compute_busy_s)
                            .then_with(|| b.cmp(&a))
                    })?;
                let dev = &self.result.devices[d];
                Some(StageTimes {
                    stage: s,
                    compute_s: dev.compute_busy_s,
                    communication_s: dev.comm_busy_s,
                    exposed_communication_s: dev.exposed_comm_s,
                    bubble_s: (self.result.step_time_s - dev.compute_busy_s - dev.exposed_comm_s)
                        .max(0.0),
                    memory_high_water_bytes: self
                        .coords
                        .iter()
                        .zip(&self.result.devices)
                        .filter(|(c, _)| c.stage == s)
                        .map(|(_, d)| d.memory_high_water_bytes)
                        .max()
                        .unwrap_or(0),
                })
            })
            .collect()
    }

    /// A name for each simulated device: its stage (with a pipeline), context-parallel rank,
    /// method rank and replica, and how many cluster devices it stands for.
    pub fn device_names(&self, pipelined: bool, context: bool) -> Vec<String> {
        self.coords
            .iter()
            .zip(&self.stands_for)
            .map(|(c, &n)| {
                let mut s = String::new();
                if pipelined {
                    s.push_str(&format!("stage {} · ", c.stage));
                }
                if context {
                    s.push_str(&format!("cp {} · ", c.cp));
                }
                s.push_str(&format!("rank {} · replica {}", c.rank, c.replica));
                if n > 1 {
                    s.push_str(&format!(" (stands for {n} devices)"));
                }
                s
            })
            .collect()
    }
}

/// Simulates one training step of `w` from its plan and its stages' inventories (built once by
/// the caller), on one device per distinct program ([`Devices::Distinct`]) or on all of them,
/// after checking the graph it builds against the tool's limits (module docs).
pub fn simulate_plan(
    w: &ValidWorkload,
    plan: &StepPlan,
    stages: &[Inventory],
    link: LinkModel,
    trace: TraceScope,
    devices: Devices,
) -> Result<WorkloadSim> {
    let size = schedule::graph_size(w, plan, devices);
    let trace_device = match trace {
        TraceScope::Auto
            if size.tasks.saturating_mul(3) / 2 > limits::TRACE_ALL_DEVICES_MAX_SPANS =>
        {
            Some(0)
        }
        _ => None,
    };
    let _memory = reserve(w, &size, trace, trace_device)?;
    let graph = schedule::lower(
        w,
        plan,
        stages,
        LowerOptions {
            devices,
            ..LowerOptions::step()
        },
    );
    let result = simulate(
        &graph,
        &w.hardware,
        link,
        SimOptions {
            trace: trace.on(),
            trace_device,
            periodic: false,
        },
    )?;
    Ok(workload_sim(w, &graph, result, trace_device, None))
}

/// The outcome of simulating `graph`, a lowering of `w` (or of a shortened copy of it,
/// described by `shortened`).
pub(super) fn workload_sim(
    w: &ValidWorkload,
    graph: &crate::schedule::TaskGraph,
    mut result: SimResult,
    trace_device: Option<u32>,
    shortened: Option<Shortened>,
) -> WorkloadSim {
    let axes = w.axes();
    let coords: Vec<Coord> = (0..graph.devices)
        .map(|d| axes.coord_of(graph.rank_of(d)))
        .collect();
    let mut stands_for = vec![0u32; graph.devices as usize];
    for r in 0..graph.cluster_devices() {
        if let Some(d) = graph.device_of(r) {
            stands_for[d as usize] += 1;
        }
    }
    let trace = result.trace.take();
    let mut out = WorkloadSim {
        devices: graph.devices,
        cluster_devices: graph.cluster_devices(),
        coords,
        stands_for,
        result,
        trace_device,
        shortened,
        composed: None,
    };
    if let Some(mut t) = trace {
        t.devices = out.device_names(w.outer.pp > 1, w.outer.cp > 1);
        out.result.trace = Some(t);
    }
    out
}

/// Checks `size` against the task limit and sets its memory aside (module docs).
pub(super) fn reserve(
    w: &ValidWorkload,
    size: &GraphSize,
    trace: TraceScope,
    trace_device: Option<u32>,
) -> Result<limits::Reservation> {
    let simulated = if size.devices < size.cluster_devices {
        format!(
            "{} simulated devices standing for {}",
            size.devices, size.cluster_devices
        )
    } else {
        format!("{} devices", size.devices)
    };
    let what = format!(
        "the simulated step of {} at p = {}, dp = {}, s = {} ({} layers × {} micro-batch(es) on \
         {simulated}: {} tasks)",
        w.method, w.p, w.dp, w.seq, w.model.layers, w.micro_batches, size.tasks
    );
    let advice = "use fewer devices (--p, --dp, --cp, --pp), fewer micro-batches \
                  (--global-batch) or fewer layers, or let the simulator shorten the step where \
                  it repeats (without --full-sim), or compose it from its distinct op programs \
                  (simulate --extrapolate; plan does so by default)";
    if size.tasks > limits::MAX_GRAPH_TASKS {
        return Err(Error::TooLarge {
            message: format!(
                "{what} is more than the 2^24 tasks the simulator takes (about a minute); {advice}"
            ),
        });
    }
    let traced_tasks = match (trace, trace_device) {
        (TraceScope::Off, _) => 0,
        (_, Some(_)) => size.tasks / size.devices.max(1),
        (_, None) => size.tasks,
    };
    let bytes = size
        .bytes()
        .saturating_add(size.tasks.saturating_mul(ENGINE_BYTES_PER_TASK))
        .saturating_add(traced_tasks.saturating_mul(TRACE_BYTES_PER_TASK));
    limits::reserve_memory(bytes, &what, advice)
}
