//! A workload's step plan through the simulator: lowered with the memory inventory's alloc/free
//! sizes over the workload's p × dp devices, then simulated.
//!
//! Before anything is built, the size of the graph the lowering will build
//! ([`schedule::graph_size`], from the plan alone) is checked against the tool's limits
//! (`config::limits`): at most `MAX_GRAPH_TASKS` tasks, and the memory the graph, the engine and
//! a trace will hold set aside from the process's budget ([`limits::reserve_memory`]) — so a
//! step too large for the machine is refused in one line that says what to change, instead of
//! aborting in the allocator, and concurrent simulations (sweep, plan) share the memory.

use super::{simulate, DeviceStats, LinkModel, SimOptions, SimResult};
use crate::config::limits;
use crate::config::ValidWorkload;
use crate::error::{Error, Result};
use crate::memory::Inventory;
use crate::schedule::{self, GraphSize, LowerOptions, StepPlan, StepTimes};

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
    /// Devices simulated (p × dp).
    pub devices: u32,
    /// The one device the trace records, when it records one ([`TraceScope::Auto`] on a large
    /// step); `None`: every device, or no trace.
    pub trace_device: Option<u32>,
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
}

/// Simulates one training step of `w` from its plan and inventory (built once by the caller),
/// after checking the graph it builds against the tool's limits (module docs).
pub fn simulate_plan(
    w: &ValidWorkload,
    plan: &StepPlan,
    inventory: &Inventory,
    link: LinkModel,
    trace: TraceScope,
) -> Result<WorkloadSim> {
    let opts = LowerOptions {
        dp: w.dp as u32,
        memory: true,
        optimizer: true,
    };
    let size = schedule::graph_size(plan, w.p as u32, opts);
    let trace_device = match trace {
        TraceScope::Auto
            if size.tasks.saturating_mul(3) / 2 > limits::TRACE_ALL_DEVICES_MAX_SPANS =>
        {
            Some(0)
        }
        _ => None,
    };
    let _memory = reserve(w, &size, trace, trace_device)?;
    let graph = schedule::lower(plan, w.p as u32, inventory, opts);
    let result = simulate(
        &graph,
        &w.hardware,
        link,
        SimOptions {
            trace: trace.on(),
            trace_device,
        },
    )?;
    Ok(WorkloadSim {
        result,
        devices: graph.devices,
        trace_device,
    })
}

/// Checks `size` against the task limit and sets its memory aside (module docs).
fn reserve(
    w: &ValidWorkload,
    size: &GraphSize,
    trace: TraceScope,
    trace_device: Option<u32>,
) -> Result<limits::Reservation> {
    let what = format!(
        "the simulated step of {} at p = {}, dp = {}, s = {} ({} layers × {} micro-batch(es) on \
         {} devices: {} tasks)",
        w.method, w.p, w.dp, w.seq, w.model.layers, w.micro_batches, size.devices, size.tasks
    );
    let advice = "use fewer devices (--p, --dp), fewer micro-batches (--global-batch) or fewer \
                  layers (simulate --extrapolate runs 2 and 4 layers and extrapolates; plan does \
                  so by default)";
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
