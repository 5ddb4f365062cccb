//! The executor: replays a [`TaskGraph`] on per-device streams over a [`Network`].
//!
//! Semantics are those of the graph module (streams in order, send/recv rendezvous, collectives
//! that begin when every rank has started, zero-time alloc/free). On top of them:
//!
//! - **Compute** lasts [`CostModel::kernel_s`] of its kernel shape at full speed (priced once per
//!   distinct shape in the graph's kernel table). While at least one communication
//!   of the same device is in flight, the device's compute runs at rate `1 − overlap_slowdown`
//!   (fluid model): each running kernel keeps its remaining work in full-speed picoseconds,
//!   which is settled (`elapsed × rate`, rounded to the nearest ps) and its completion
//!   rescheduled whenever the device's communication switches between idle and busy. Kernels
//!   on different streams of one device run side by side without sharing the GPU (a graph that
//!   puts compute on several streams of a device gets no contention between them).
//! - **Communication is in flight** on a device from the moment a send/recv pair has met (or a
//!   collective has gathered every rank) until its last byte arrives, on the sending and the
//!   receiving device (every group member for a collective). A send or recv waiting for its
//!   peer holds its stream but is not in flight.
//! - **Messages** cost α and then move at the rate the link model gives them ([`super::network`]);
//!   collectives run as ring steps ([`super::collective`]). Flow completion times are rounded up
//!   to the next picosecond.
//! - **Memory**: `Alloc`/`Free` change the device's live bytes (starting at 0); the high-water
//!   mark is reported. Freeing more than is live is an error.
//!
//! Time is integer picoseconds and every tie is broken FIFO, so the same graph always gives the
//! same result, to the byte.
//!
//! If the event queue empties while tasks remain, the graph deadlocked: [`Error::Deadlock`]
//! names a few stream heads that are stuck and what each waits for. The engine never hangs.

use std::collections::VecDeque;

use serde::Serialize;

use super::collective::Transfer;
use super::flows::FlowSet;
use super::network::{LinkModel, Network};
use super::queue::{ps_to_secs, secs_to_ps, EventQueue, SimTime};
use super::trace::{label_name, stream_name, Span, Trace, Track};
use crate::config::Hardware;
use crate::cost::CostModel;
use crate::error::Error;
use crate::schedule::{CollectiveOp, DeviceId, Segment, Stream, TaskGraph, Work};

/// What to record besides the totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimOptions {
    /// Record a span per task and per flow on each link ([`SimResult::trace`]).
    pub trace: bool,
    /// With `trace`: record only this device's stream spans and the link spans of the messages
    /// and collectives it takes part in (a representative device of a large run); `None`: all.
    pub trace_device: Option<DeviceId>,
    /// Watch the graph's declared rounds ([`crate::schedule::Periodic`]) and prove where they
    /// repeat ([`SimResult::periodic`]; `recurrence`).
    pub periodic: bool,
}

/// Per-device totals of one simulated step.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct DeviceStats {
    /// Wall time with at least one compute task running.
    pub compute_busy_s: f64,
    /// Wall time with at least one communication in flight (see the module docs).
    pub comm_busy_s: f64,
    /// Exposed communication: wall time during which at least one communication of this device
    /// is in flight and no compute task of this device is running. Communication hidden behind
    /// compute does not count; communication the device waits on (or that runs after its last
    /// kernel) does. `comm_busy_s − exposed_comm_s` is the overlapped part.
    pub exposed_comm_s: f64,
    /// Largest live bytes reached through the graph's `Alloc`/`Free` tasks.
    pub memory_high_water_bytes: u128,
    /// When the device's last task finished.
    pub finish_s: f64,
    /// When the last task of its compute stream ended — kernels, and the joins that end each
    /// phase once its communication is done (what runs after it, to `finish_s`, is
    /// communication left in flight, such as gradient synchronisations); kept out of the JSON.
    #[serde(skip)]
    pub kernels_end_s: f64,
    /// Its exposed communication up to `kernels_end_s`; kept out of the JSON.
    #[serde(skip)]
    pub exposed_to_kernels_end_s: f64,
}

/// The outcome of simulating one graph.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimResult {
    /// Makespan: when the last task finished, in seconds.
    pub step_time_s: f64,
    /// Makespan in ps.
    pub makespan_ps: SimTime,
    /// Per-device totals, by device id.
    pub devices: Vec<DeviceStats>,
    /// Events taken off the queue (including superseded ones).
    pub events: u64,
    /// Tasks executed.
    pub tasks: u64,
    /// Spans, when [`SimOptions::trace`] was set.
    pub trace: Option<Trace>,
    /// With [`SimOptions::periodic`], per declared run of rounds, its proof of periodicity
    /// (`None`: not proven).
    pub periodic: Vec<Option<PeriodProof>>,
}

impl SimResult {
    /// Largest per-device exposed communication, in seconds.
    pub fn max_exposed_comm_s(&self) -> f64 {
        self.devices
            .iter()
            .map(|d| d.exposed_comm_s)
            .fold(0.0, f64::max)
    }

    /// Largest per-device memory high-water mark, in bytes.
    pub fn max_memory_high_water_bytes(&self) -> u128 {
        self.devices
            .iter()
            .map(|d| d.memory_high_water_bytes)
            .max()
            .unwrap_or(0)
    }
}

/// Simulates `graph` on `hw`: see the module docs for the semantics.
pub fn simulate(
    graph: &TaskGraph,
    hw: &Hardware,
    model: LinkModel,
    opts: SimOptions,
) -> Result<SimResult, Error> {
    let mut e = Engine::new(graph, hw, model, opts)?;
    e.run()?;
    let r = e.result();
    // The clock saturates at 2^64 ps rather than wrapping; anything at or past the limit is a
    // step the clock cannot represent (every single duration is below 10^6 s = 10^18 ps, so a
    // makespan below 2^62 ps means no addition saturated).
    if r.makespan_ps >= crate::config::limits::MAX_SIM_PS {
        return Err(Error::TooLarge {
            message: format!(
                "the simulated step would last {:.3e} s or more, beyond the simulator's clock \
                 (2^62 ps, about 53 days, in 64-bit picoseconds); shorten the sequence or use \
                 more devices",
                ps_to_secs(crate::config::limits::MAX_SIM_PS)
            ),
        });
    }
    Ok(r)
}

const NOT_STARTED: u8 = 0;
const STARTED: u8 = 1;
const DONE: u8 = 2;
const NONE: u32 = u32::MAX;
/// Largest device count accepted (the per-device tables stay small).
const MAX_DEVICES: u32 = 1 << 20;

#[derive(Debug, Clone, Copy)]
enum Ev {
    Compute { task: u32, gen: u32 },
    Latency { op: u32 },
    Flow { slot: u32, gen: u32 },
}

#[derive(Debug, Clone, Copy)]
enum Action {
    Start(u32),
    Complete(u32),
}

#[derive(Debug, Clone, Copy)]
enum OpKind {
    P2p { send: u32, recv: u32 },
    Coll { coll: u32 },
}

#[derive(Debug, Clone, Copy)]
struct Op {
    kind: OpKind,
    step: u32,
    steps: u32,
    flows_left: u32,
    /// Task whose label the op's flows carry.
    rep: u32,
}

#[derive(Debug, Clone)]
struct Coll {
    /// Member tasks, in task order.
    members: std::ops::Range<u32>,
    started: u32,
    /// Its class: collectives of equal op, group and size share their plan and senders
    /// (index into `classes`).
    class: u32,
}

/// What the collectives of one op, group and size share: a step has tens of thousands of
/// collectives but a few hundred such classes, so the library's plan is made (and the
/// canonical senders found) once per class instead of once per collective.
#[derive(Debug, Clone)]
struct CollClass {
    /// On a folded graph, the positions in the group of its canonical ranks — the only
    /// senders whose transfers move (graph module docs), as a range of `class_senders`; empty
    /// when nothing is folded.
    senders: std::ops::Range<u32>,
    /// The library's plan, made when a collective of the class first has every member started.
    plan: Option<crate::cost::Plan>,
    op: CollectiveOp,
    bytes: u64,
    /// Its group (cluster ranks, in ring order), as a range of `class_groups`.
    group: std::ops::Range<u32>,
    /// Made with the plan: step k's transfers that move, with their routes, are
    /// `class_flows[flows[k]..flows[k + 1]]` (the same for every collective of the class).
    flows: Vec<u32>,
}

#[derive(Debug, Clone, Default)]
struct Dev {
    running: u32,
    comm: u32,
    last: SimTime,
    compute_busy: SimTime,
    comm_busy: SimTime,
    exposed: SimTime,
    live: u128,
    high: u128,
    finish: SimTime,
    kernels_end: SimTime,
    exposed_at_kernels_end: SimTime,
}

/// What a task is, for the hot path (so it need not read the graph's `Work`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Compute,
    Send,
    Recv,
    Collective,
    Alloc,
    Free,
}

/// The engine's per-task state, kept together for locality.
#[derive(Debug, Clone, Copy)]
struct TaskState {
    /// Compute: remaining full-speed work in ps as of `last`. Send, alloc, free: bytes.
    work: u64,
    last: SimTime,
    device: u32,
    /// Dense stream index.
    stream: u32,
    deps_left: u32,
    /// Bumped whenever a compute completion is rescheduled; stale events carry an old value.
    gen: u32,
    /// Send/recv: the matching task. Collective: index into `colls`.
    peer: u32,
    kind: Kind,
    state: u8,
    slow: bool,
}

#[derive(Debug)]
struct Engine<'g> {
    g: &'g TaskGraph,
    net: Network,
    flows: FlowSet,
    q: EventQueue<Ev>,
    now: SimTime,
    // Per task.
    ts: Vec<TaskState>,
    dependents_off: Vec<u32>,
    dependents: Vec<u32>,
    started_at: Vec<SimTime>,
    // Per stream.
    stream_off: Vec<u32>,
    stream_tasks: Vec<u32>,
    cursor: Vec<u32>,
    stream_key: Vec<(DeviceId, Stream)>,
    // Collectives and communication ops.
    colls: Vec<Coll>,
    coll_tasks: Vec<u32>,
    classes: Vec<CollClass>,
    class_senders: Vec<u32>,
    class_groups: Vec<DeviceId>,
    class_flows: Vec<(Transfer, super::network::Route)>,
    ops: Vec<Op>,
    // Devices.
    dev: Vec<Dev>,
    running: Vec<Vec<u32>>,
    slow_rate: f64,
    slowdown: bool,
    // Work lists and scratch.
    actions: VecDeque<Action>,
    transfers: Vec<Transfer>,
    /// Ideal model: flows of the current step per link (zero between steps).
    link_count: Vec<u32>,
    routes: Vec<super::network::Route>,
    changed: Vec<u32>,
    devs: Vec<u32>,
    done: usize,
    events: u64,
    spans: Option<Vec<Span>>,
    trace_device: Option<DeviceId>,
    /// With `trace_device`: per flow slot, whether the flow starts or ends at that device (a
    /// collective's flows between other devices stay out of a one-device trace).
    flow_traced: Vec<bool>,
    /// The recurrence monitor, with [`SimOptions::periodic`].
    mon: Option<Box<recurrence::Monitor>>,
}

/// Send/recv rendezvous key `(from, to, tag)` packed for fast sorting.
fn p2p_key(from: DeviceId, to: DeviceId, tag: u64) -> u128 {
    (from as u128) << 96 | (to as u128) << 64 | tag as u128
}

fn invalid(message: String) -> Error {
    Error::InvalidGraph { message }
}

mod deadlock;
mod event_loop;
mod prepare;
mod recurrence;

pub use recurrence::PeriodProof;

#[cfg(test)]
mod tests;
