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

use super::collective::{self, StepLatency, Transfer};
use super::network::{FlowSet, LinkModel, Network};
use super::queue::{ps_to_secs, secs_to_ps, EventQueue, SimTime};
use super::trace::{label_name, stream_name};
use crate::config::Hardware;
use crate::cost::CostModel;
use crate::error::Error;
use crate::schedule::{CollectiveOp, DeviceId, Label, Stream, TaskGraph, TaskId, Work};

/// What to record besides the totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimOptions {
    /// Record a span per task and per flow on each link ([`SimResult::trace`]).
    pub trace: bool,
}

/// Per-device totals of one simulated step.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
}

/// Where a span is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Track {
    /// A device stream.
    Stream {
        /// Device.
        device: DeviceId,
        /// Stream.
        stream: Stream,
    },
    /// A link of the network (index into [`Trace::links`]).
    Link {
        /// Link index.
        link: u32,
    },
}

/// One interval of a trace. On a stream, a task's span runs from when it started (for a
/// send, recv or collective this includes waiting for its peers) to when it finished; on a link,
/// a flow's span runs from when its bytes started moving (after α) to when they arrived.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Span {
    /// Where.
    pub track: Track,
    /// Start, in ps.
    pub start_ps: SimTime,
    /// End, in ps.
    pub end_ps: SimTime,
    /// The task (for a link span: the send, or the first rank's collective task).
    pub task: TaskId,
    /// The task's label.
    pub label: Label,
    /// For a collective's flow: its ring step.
    pub collective_step: Option<u32>,
}

/// A recorded trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trace {
    /// Spans in the order they ended.
    pub spans: Vec<Span>,
    /// Link names, by link index.
    pub links: Vec<String>,
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
    Ok(e.result())
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
    ops: Vec<Op>,
    // Devices.
    dev: Vec<Dev>,
    running: Vec<Vec<u32>>,
    slow_rate: f64,
    slowdown: bool,
    // Work lists and scratch.
    actions: VecDeque<Action>,
    transfers: Vec<Transfer>,
    changed: Vec<u32>,
    devs: Vec<u32>,
    done: usize,
    events: u64,
    spans: Option<Vec<Span>>,
}

/// Send/recv rendezvous key `(from, to, tag)` packed for fast sorting.
fn p2p_key(from: DeviceId, to: DeviceId, tag: u64) -> u128 {
    (from as u128) << 96 | (to as u128) << 64 | tag as u128
}

fn invalid(message: String) -> Error {
    Error::InvalidGraph { message }
}

impl<'g> Engine<'g> {
    fn new(
        g: &'g TaskGraph,
        hw: &Hardware,
        model: LinkModel,
        opts: SimOptions,
    ) -> Result<Self, Error> {
        let n = g.tasks.len();
        if n >= NONE as usize {
            return Err(invalid(format!(
                "{n} tasks is more than the simulator handles"
            )));
        }
        if g.devices > MAX_DEVICES {
            return Err(invalid(format!(
                "{} devices is more than the simulator handles ({MAX_DEVICES})",
                g.devices
            )));
        }
        let cost = CostModel::new(hw);
        let net = Network::new(hw, g.devices);
        let flows = FlowSet::new(&net, model);
        // Kernel durations, once per distinct shape in the graph's table.
        let mut durations = Vec::with_capacity(g.kernels.len());
        for (i, k) in g.kernels.iter().enumerate() {
            let s = cost.kernel_s(k);
            if !(s.is_finite() && (0.0..1e6).contains(&s)) {
                return Err(invalid(format!(
                    "kernel {i} ({k:?}) would take {s:.3e} s, more than the simulator's \
                     picosecond clock holds for one kernel (10^6 s)"
                )));
            }
            durations.push(secs_to_ps(s));
        }

        // One pass over the graph: validate, index streams (dense, in order of first
        // appearance), price kernels, flatten dependencies, collect rendezvous keys.
        // Per device, its streams seen so far as (stream code, dense index); a device has few.
        let mut stream_idx: Vec<Vec<(u16, u32)>> = vec![Vec::new(); g.devices as usize];
        let mut stream_key = Vec::new();
        let mut ts = Vec::with_capacity(n);
        let mut dep_count = vec![0u32; n];
        // Sized up front: large graphs otherwise spend a visible share of their preparation
        // growing and copying these lists.
        let total_deps: usize = g.tasks.iter().map(|t| t.deps.len()).sum();
        let mut dep_flat: Vec<u32> = Vec::with_capacity(total_deps);
        let (mut n_send, mut n_recv, mut n_coll) = (0, 0, 0);
        for t in &g.tasks {
            match t.work {
                Work::Send { .. } => n_send += 1,
                Work::Recv { .. } => n_recv += 1,
                Work::Collective { .. } => n_coll += 1,
                _ => {}
            }
        }
        let mut sends = Vec::with_capacity(n_send);
        let mut recvs = Vec::with_capacity(n_recv);
        let mut coll_keys = Vec::with_capacity(n_coll);
        for (i, t) in g.tasks.iter().enumerate() {
            if t.device >= g.devices {
                return Err(invalid(format!(
                    "task {i} runs on device {} of {}",
                    t.device, g.devices
                )));
            }
            let code = match t.stream {
                Stream::Compute => 0,
                Stream::Comm(c) => 1 + c as u16,
            };
            let known = &mut stream_idx[t.device as usize];
            let stream = match known.iter().find(|e| e.0 == code) {
                Some(e) => e.1,
                None => {
                    let idx = stream_key.len() as u32;
                    known.push((code, idx));
                    stream_key.push((t.device, t.stream));
                    idx
                }
            };
            for &d in &t.deps {
                if d as usize >= i {
                    return Err(invalid(format!("task {i} depends on later task {d}")));
                }
                dep_count[d as usize] += 1;
            }
            dep_flat.extend_from_slice(&t.deps);
            let mut work = 0;
            let kind = match &t.work {
                Work::Compute { kernel } => {
                    work = *durations.get(*kernel as usize).ok_or_else(|| {
                        invalid(format!(
                            "task {i} runs kernel {kernel} of a table of {}",
                            g.kernels.len()
                        ))
                    })?;
                    Kind::Compute
                }
                Work::Send { to, tag, bytes } => {
                    work = *bytes;
                    sends.push((p2p_key(t.device, *to, *tag), i as u32, *bytes));
                    Kind::Send
                }
                Work::Recv { from, tag, bytes } => {
                    recvs.push((p2p_key(*from, t.device, *tag), i as u32, *bytes));
                    Kind::Recv
                }
                Work::Collective { id, .. } => {
                    coll_keys.push((*id, i as u32));
                    Kind::Collective
                }
                Work::Alloc { bytes, .. } | Work::Free { bytes, .. } => {
                    work = u64::try_from(*bytes).map_err(|_| {
                        invalid(format!("task {i}: {bytes} bytes is more than 2^64"))
                    })?;
                    if matches!(t.work, Work::Alloc { .. }) {
                        Kind::Alloc
                    } else {
                        Kind::Free
                    }
                }
            };
            ts.push(TaskState {
                work,
                last: 0,
                device: t.device,
                stream,
                deps_left: t.deps.len() as u32,
                gen: 0,
                peer: NONE,
                kind,
                state: NOT_STARTED,
                slow: false,
            });
        }

        // Dependents (CSR), filled from the flattened dependency lists.
        let mut dependents_off = Vec::with_capacity(n + 1);
        let mut acc = 0u32;
        for c in &dep_count {
            dependents_off.push(acc);
            acc += c;
        }
        dependents_off.push(acc);
        let mut fill = dependents_off.clone();
        let mut dependents = vec![0u32; acc as usize];
        let mut k = 0;
        for (i, st) in ts.iter().enumerate() {
            for &d in &dep_flat[k..k + st.deps_left as usize] {
                dependents[fill[d as usize] as usize] = i as u32;
                fill[d as usize] += 1;
            }
            k += st.deps_left as usize;
        }
        drop(dep_flat);

        // Streams (CSR, tasks in insertion order).
        let ns = stream_key.len();
        let mut stream_off = vec![0u32; ns + 1];
        for st in &ts {
            stream_off[st.stream as usize + 1] += 1;
        }
        for s in 0..ns {
            stream_off[s + 1] += stream_off[s];
        }
        let mut fill = stream_off.clone();
        let mut stream_tasks = vec![0u32; n];
        for (i, st) in ts.iter().enumerate() {
            stream_tasks[fill[st.stream as usize] as usize] = i as u32;
            fill[st.stream as usize] += 1;
        }
        let cursor = stream_off[..ns].to_vec();

        // Send/recv matching: sort both sides by key and walk them together. Any mismatch is
        // reported with the graph's own check when it finds one.
        sends.sort_unstable_by_key(|x| x.0);
        recvs.sort_unstable_by_key(|x| x.0);
        let mismatch = |fallback: String| invalid(g.check().err().unwrap_or(fallback));
        if sends.len() != recvs.len() {
            return Err(mismatch(format!(
                "{} sends but {} recvs",
                sends.len(),
                recvs.len()
            )));
        }
        for (k, (s, r)) in sends.iter().zip(&recvs).enumerate() {
            let dup = k > 0 && (sends[k - 1].0 == s.0 || recvs[k - 1].0 == r.0);
            if s.0 != r.0 || dup {
                return Err(mismatch(format!(
                    "send task {} and recv task {} do not match",
                    s.1, r.1
                )));
            }
            let (sb, rb) = (s.2, r.2);
            if sb != rb {
                return Err(mismatch(format!(
                    "send task {} carries {sb} bytes but recv task {} expects {rb}",
                    s.1, r.1
                )));
            }
            ts[s.1 as usize].peer = r.1;
            ts[r.1 as usize].peer = s.1;
        }

        // Collectives: group member tasks by id and check them against the group.
        coll_keys.sort_unstable();
        let mut colls = Vec::new();
        let mut coll_tasks = Vec::with_capacity(coll_keys.len());
        let mut k = 0;
        while k < coll_keys.len() {
            let id = coll_keys[k].0;
            let begin = coll_tasks.len() as u32;
            while k < coll_keys.len() && coll_keys[k].0 == id {
                let t = coll_keys[k].1;
                ts[t as usize].peer = colls.len() as u32;
                coll_tasks.push(t);
                k += 1;
            }
            let members = begin..coll_tasks.len() as u32;
            Self::check_collective(g, id, &coll_tasks[members.start as usize..])?;
            colls.push(Coll {
                members,
                started: 0,
            });
        }

        let slow_rate = 1.0 - cost.overlap_slowdown();
        Ok(Engine {
            g,
            net,
            flows,
            q: EventQueue::new(),
            now: 0,
            ts,
            dependents_off,
            dependents,
            started_at: if opts.trace { vec![0; n] } else { Vec::new() },
            stream_off,
            stream_tasks,
            cursor,
            stream_key,
            colls,
            coll_tasks,
            ops: Vec::new(),
            dev: vec![Dev::default(); g.devices as usize],
            running: vec![Vec::new(); g.devices as usize],
            slow_rate,
            slowdown: slow_rate < 1.0,
            actions: VecDeque::new(),
            transfers: Vec::new(),
            changed: Vec::new(),
            devs: Vec::new(),
            done: 0,
            events: 0,
            spans: opts.trace.then(Vec::new),
        })
    }

    fn check_collective(g: &TaskGraph, id: u64, members: &[u32]) -> Result<(), Error> {
        let first = &g.tasks[members[0] as usize];
        let Work::Collective {
            op, group, bytes, ..
        } = &first.work
        else {
            unreachable!("collected from collectives")
        };
        let fail = |m: String| Err(invalid(g.check().err().unwrap_or(m)));
        if members.len() != group.len() {
            return fail(format!(
                "collective {id} has {} participating tasks for a group of {}",
                members.len(),
                group.len()
            ));
        }
        if let Some(&d) = group.iter().find(|&&d| d >= g.devices) {
            return fail(format!(
                "collective {id}: group names device {d} of {}",
                g.devices
            ));
        }
        if let CollectiveOp::Broadcast { root } | CollectiveOp::Reduce { root } = op {
            if !group.contains(root) {
                return fail(format!("collective {id}: root {root} is not in its group"));
            }
        }
        let mut devs: Vec<u32> = Vec::with_capacity(members.len());
        for &m in members {
            let t = &g.tasks[m as usize];
            let Work::Collective {
                op: o,
                group: gr,
                bytes: b,
                ..
            } = &t.work
            else {
                unreachable!("collected from collectives")
            };
            if o != op || gr != group || b != bytes {
                return fail(format!(
                    "collective {id}: task {m} disagrees with task {} on op, group or size",
                    members[0]
                ));
            }
            devs.push(t.device);
        }
        devs.sort_unstable();
        let mut want = group.clone();
        want.sort_unstable();
        if devs != want {
            return fail(format!(
                "collective {id}: its tasks run on devices {devs:?} but its group is {group:?}"
            ));
        }
        Ok(())
    }

    fn run(&mut self) -> Result<(), Error> {
        for s in 0..self.stream_key.len() {
            let h = self.stream_tasks[self.cursor[s] as usize];
            if self.ts[h as usize].deps_left == 0 {
                self.actions.push_back(Action::Start(h));
            }
        }
        loop {
            self.drain()?;
            if self.flows.needs_resolve() && self.q.peek_time().is_none_or(|t| t > self.now) {
                self.resolve_flows();
                continue;
            }
            let Some((t, ev)) = self.q.pop() else { break };
            self.now = t;
            self.events += 1;
            match ev {
                Ev::Compute { task, gen } => {
                    if self.ts[task as usize].gen == gen {
                        self.finish_compute(task);
                    }
                }
                Ev::Latency { op } => self.start_flows(op),
                Ev::Flow { slot, gen } => {
                    if self.flows.get(slot).gen == gen {
                        self.finish_flow(slot);
                    }
                }
            }
        }
        if self.done < self.g.tasks.len() {
            return Err(Error::Deadlock {
                message: self.deadlock_message(),
            });
        }
        Ok(())
    }

    fn resolve_flows(&mut self) {
        let mut changed = std::mem::take(&mut self.changed);
        changed.clear();
        self.flows.resolve(self.now, &mut changed);
        for &slot in &changed {
            if let Some(t) = self.flows.finish_time(slot) {
                let gen = self.flows.get(slot).gen;
                self.q.push(t, Ev::Flow { slot, gen });
            }
        }
        self.changed = changed;
    }

    /// Processes starts and completions that happen at `now` without an event.
    fn drain(&mut self) -> Result<(), Error> {
        while let Some(a) = self.actions.pop_front() {
            match a {
                Action::Start(t) => self.start(t)?,
                Action::Complete(t) => self.complete(t),
            }
        }
        Ok(())
    }

    /// Accounts the device's time since its last change, before its state changes.
    fn touch(&mut self, d: u32) {
        let now = self.now;
        let dev = &mut self.dev[d as usize];
        let dt = now - dev.last;
        if dt > 0 {
            if dev.running > 0 {
                dev.compute_busy += dt;
            }
            if dev.comm > 0 {
                dev.comm_busy += dt;
                if dev.running == 0 {
                    dev.exposed += dt;
                }
            }
        }
        dev.last = now;
    }

    fn start(&mut self, t: u32) -> Result<(), Error> {
        let ti = t as usize;
        let st = &mut self.ts[ti];
        st.state = STARTED;
        let (d, kind) = (st.device, st.kind);
        if !self.started_at.is_empty() {
            self.started_at[ti] = self.now;
        }
        match kind {
            Kind::Compute => {
                self.touch(d);
                let dev = &mut self.dev[d as usize];
                dev.running += 1;
                let slow = self.slowdown && dev.comm > 0;
                if self.slowdown {
                    self.running[d as usize].push(t);
                }
                let st = &mut self.ts[ti];
                st.slow = slow;
                st.last = self.now;
                self.schedule_compute(t);
            }
            Kind::Send | Kind::Recv => {
                let p = self.ts[ti].peer;
                if self.ts[p as usize].state == STARTED {
                    let (send, recv) = if kind == Kind::Send { (t, p) } else { (p, t) };
                    self.begin_op(OpKind::P2p { send, recv }, 1, send);
                }
            }
            Kind::Collective => {
                let Work::Collective { op, ref group, .. } = self.g.tasks[ti].work else {
                    unreachable!("kind follows work")
                };
                let c = self.ts[ti].peer;
                let coll = &mut self.colls[c as usize];
                coll.started += 1;
                if coll.started == coll.members.end - coll.members.start {
                    let steps = collective::steps(op, group.len());
                    let rep = self.coll_tasks[coll.members.start as usize];
                    self.begin_op(OpKind::Coll { coll: c }, steps, rep);
                }
            }
            Kind::Alloc => {
                let dev = &mut self.dev[d as usize];
                dev.live += self.ts[ti].work as u128;
                dev.high = dev.high.max(dev.live);
                self.actions.push_back(Action::Complete(t));
            }
            Kind::Free => {
                let dev = &mut self.dev[d as usize];
                let bytes = self.ts[ti].work as u128;
                if bytes > dev.live {
                    let Work::Free { tensor, .. } = self.g.tasks[ti].work else {
                        unreachable!("kind follows work")
                    };
                    return Err(invalid(format!(
                        "task {t} frees {bytes} bytes of '{tensor}' on device {d}, which has only {} live",
                        dev.live
                    )));
                }
                dev.live -= bytes;
                self.actions.push_back(Action::Complete(t));
            }
        }
        Ok(())
    }

    fn schedule_compute(&mut self, t: u32) {
        let ti = t as usize;
        let dur = if self.ts[ti].slow {
            (self.ts[ti].work as f64 / self.slow_rate).ceil() as SimTime
        } else {
            self.ts[ti].work
        };
        self.ts[ti].gen = self.ts[ti].gen.wrapping_add(1);
        self.q.push(
            self.now.saturating_add(dur),
            Ev::Compute {
                task: t,
                gen: self.ts[ti].gen,
            },
        );
    }

    /// Changes the speed of device `d`'s running kernels (communication became busy or idle).
    fn set_device_slow(&mut self, d: u32, slow: bool) {
        let now = self.now;
        for i in 0..self.running[d as usize].len() {
            let t = self.running[d as usize][i] as usize;
            if self.ts[t].slow == slow {
                continue;
            }
            let elapsed = now - self.ts[t].last;
            let done = if self.ts[t].slow {
                (elapsed as f64 * self.slow_rate).round() as SimTime
            } else {
                elapsed
            };
            self.ts[t].work = self.ts[t].work.saturating_sub(done);
            self.ts[t].last = now;
            self.ts[t].slow = slow;
            self.schedule_compute(t as u32);
        }
    }

    fn finish_compute(&mut self, t: u32) {
        let d = self.ts[t as usize].device;
        self.touch(d);
        self.dev[d as usize].running -= 1;
        if self.slowdown {
            let r = &mut self.running[d as usize];
            if let Some(i) = r.iter().position(|&x| x == t) {
                r.swap_remove(i);
            }
        }
        self.complete(t);
    }

    fn complete(&mut self, t: u32) {
        let ti = t as usize;
        self.ts[ti].state = DONE;
        self.done += 1;
        let d = self.ts[ti].device as usize;
        self.dev[d].finish = self.now;
        let s = self.ts[ti].stream as usize;
        if let Some(spans) = &mut self.spans {
            let task = &self.g.tasks[ti];
            spans.push(Span {
                track: Track::Stream {
                    device: task.device,
                    stream: task.stream,
                },
                start_ps: self.started_at[ti],
                end_ps: self.now,
                task: t,
                label: task.label,
                collective_step: None,
            });
        }
        self.cursor[s] += 1;
        if self.cursor[s] < self.stream_off[s + 1] {
            let h = self.stream_tasks[self.cursor[s] as usize];
            if self.ts[h as usize].deps_left == 0 {
                self.actions.push_back(Action::Start(h));
            }
        }
        for k in self.dependents_off[ti]..self.dependents_off[ti + 1] {
            let x = self.dependents[k as usize];
            let left = &mut self.ts[x as usize].deps_left;
            *left -= 1;
            if *left == 0 {
                let sx = self.ts[x as usize].stream as usize;
                if self.stream_tasks[self.cursor[sx] as usize] == x
                    && self.ts[x as usize].state == NOT_STARTED
                {
                    self.actions.push_back(Action::Start(x));
                }
            }
        }
    }

    /// Devices taking part in an op, written to `out`.
    fn op_devices(&self, kind: OpKind, out: &mut Vec<u32>) {
        out.clear();
        match kind {
            OpKind::P2p { send, recv } => {
                out.push(self.ts[send as usize].device);
                out.push(self.ts[recv as usize].device);
            }
            OpKind::Coll { coll } => {
                let c = &self.colls[coll as usize];
                for &m in &self.coll_tasks[c.members.start as usize..c.members.end as usize] {
                    out.push(self.ts[m as usize].device);
                }
            }
        }
    }

    fn set_comm(&mut self, kind: OpKind, delta: i32) {
        let mut devs = std::mem::take(&mut self.devs);
        self.op_devices(kind, &mut devs);
        for &d in &devs {
            self.touch(d);
            let c = &mut self.dev[d as usize].comm;
            let before = *c;
            *c = before.wrapping_add_signed(delta);
            let after = *c;
            if self.slowdown && (before == 0) != (after == 0) {
                self.set_device_slow(d, after > 0);
            }
        }
        self.devs = devs;
    }

    fn begin_op(&mut self, kind: OpKind, steps: u32, rep: u32) {
        let op = self.ops.len() as u32;
        self.ops.push(Op {
            kind,
            step: 0,
            steps,
            flows_left: 0,
            rep,
        });
        self.set_comm(kind, 1);
        self.begin_step(op);
    }

    /// Fills `self.transfers` with the op's current step; returns the step's latency.
    fn step_transfers(&mut self, op: u32) -> SimTime {
        let o = self.ops[op as usize];
        self.transfers.clear();
        let rule = match o.kind {
            OpKind::P2p { send, recv } => {
                self.transfers.push(Transfer {
                    src: self.ts[send as usize].device,
                    dst: self.ts[recv as usize].device,
                    bytes: self.ts[send as usize].work as f64,
                });
                StepLatency::Parallel
            }
            OpKind::Coll { .. } => {
                let Work::Collective {
                    op: cop,
                    ref group,
                    bytes,
                    ..
                } = self.g.tasks[o.rep as usize].work
                else {
                    unreachable!("collective ops start from a collective")
                };
                collective::step(cop, group, bytes, o.step, &mut self.transfers)
            }
        };
        let lats = self
            .transfers
            .iter()
            .map(|x| self.net.latency_ps(x.src, x.dst));
        match rule {
            StepLatency::Parallel => lats.max().unwrap_or(0),
            StepLatency::Chain => lats.sum(),
        }
    }

    fn begin_step(&mut self, op: u32) {
        let o = self.ops[op as usize];
        if o.step >= o.steps {
            self.finish_op(op);
            return;
        }
        let lat = self.step_transfers(op);
        if lat > 0 {
            self.q
                .push(self.now.saturating_add(lat), Ev::Latency { op });
        } else {
            self.start_flows(op);
        }
    }

    fn start_flows(&mut self, op: u32) {
        self.step_transfers(op);
        let mut n = 0;
        for i in 0..self.transfers.len() {
            let x = self.transfers[i];
            let route = self.net.route(x.src, x.dst);
            self.flows.add(self.now, route, x.bytes, op);
            n += 1;
        }
        self.ops[op as usize].flows_left = n;
        if n == 0 {
            self.ops[op as usize].step += 1;
            self.begin_step(op);
        }
    }

    fn finish_flow(&mut self, slot: u32) {
        let (op, start, route) = {
            let f = self.flows.get(slot);
            (f.owner, f.start, f.route)
        };
        self.flows.remove(slot);
        let o = self.ops[op as usize];
        if let Some(spans) = &mut self.spans {
            let label = self.g.tasks[o.rep as usize].label;
            let step = matches!(o.kind, OpKind::Coll { .. }).then_some(o.step);
            for &l in route.links() {
                spans.push(Span {
                    track: Track::Link { link: l },
                    start_ps: start,
                    end_ps: self.now,
                    task: o.rep,
                    label,
                    collective_step: step,
                });
            }
        }
        let o = &mut self.ops[op as usize];
        o.flows_left -= 1;
        if o.flows_left == 0 {
            o.step += 1;
            self.begin_step(op);
        }
    }

    fn finish_op(&mut self, op: u32) {
        let kind = self.ops[op as usize].kind;
        self.set_comm(kind, -1);
        match kind {
            OpKind::P2p { send, recv } => {
                self.actions.push_back(Action::Complete(send));
                self.actions.push_back(Action::Complete(recv));
            }
            OpKind::Coll { coll } => {
                let c = &self.colls[coll as usize];
                for k in c.members.clone() {
                    let m = self.coll_tasks[k as usize];
                    self.actions.push_back(Action::Complete(m));
                }
            }
        }
    }

    fn describe(&self, t: u32) -> String {
        let task = &self.g.tasks[t as usize];
        format!(
            "task {t} ({} on device {} {})",
            label_name(&task.label, None),
            task.device,
            stream_name(task.stream)
        )
    }

    /// Why a task that has not started cannot start.
    fn blocked_on(&self, t: u32) -> String {
        let s = self.ts[t as usize].stream as usize;
        let head = self.stream_tasks[self.cursor[s] as usize];
        if head != t {
            return format!("is queued behind {} on its stream", self.describe(head));
        }
        let waiting: Vec<String> = self.g.tasks[t as usize]
            .deps
            .iter()
            .filter(|&&d| self.ts[d as usize].state != DONE)
            .take(3)
            .map(|&d| self.describe(d))
            .collect();
        format!("waits for {}", waiting.join(", "))
    }

    fn deadlock_message(&self) -> String {
        const SHOWN: usize = 4;
        let mut stuck = Vec::new();
        let mut heads = 0;
        for s in 0..self.stream_key.len() {
            if self.cursor[s] >= self.stream_off[s + 1] {
                continue;
            }
            heads += 1;
            if stuck.len() == SHOWN {
                continue;
            }
            let h = self.stream_tasks[self.cursor[s] as usize];
            let task = &self.g.tasks[h as usize];
            let what = if self.ts[h as usize].state == STARTED {
                match &task.work {
                    Work::Send { to, tag, .. } => {
                        let p = self.ts[h as usize].peer;
                        format!(
                            "sends to device {to} (tag {tag}) and waits for its recv, {}, which {}",
                            self.describe(p),
                            self.blocked_on(p)
                        )
                    }
                    Work::Recv { from, tag, .. } => {
                        let p = self.ts[h as usize].peer;
                        format!(
                            "receives from device {from} (tag {tag}) and waits for its send, {}, which {}",
                            self.describe(p),
                            self.blocked_on(p)
                        )
                    }
                    Work::Collective { id, .. } => {
                        let c = &self.colls[self.ts[h as usize].peer as usize];
                        let missing: Vec<String> = c
                            .members
                            .clone()
                            .map(|k| self.coll_tasks[k as usize])
                            .filter(|&m| self.ts[m as usize].state == NOT_STARTED)
                            .take(2)
                            .map(|m| format!("{}, which {}", self.describe(m), self.blocked_on(m)))
                            .collect();
                        format!(
                            "waits for the other ranks of collective {id}: {}",
                            missing.join("; ")
                        )
                    }
                    _ => "started but never finished".to_string(),
                }
            } else {
                self.blocked_on(h)
            };
            stuck.push(format!("{} {what}", self.describe(h)));
        }
        format!(
            "{} of {} tasks never finished (stopped at {:.3} µs); {heads} stream(s) stuck, e.g.: {}",
            self.g.tasks.len() - self.done,
            self.g.tasks.len(),
            ps_to_secs(self.now) * 1e6,
            stuck.join("; ")
        )
    }

    fn result(mut self) -> SimResult {
        for d in 0..self.dev.len() as u32 {
            self.touch(d);
        }
        let makespan = self.dev.iter().map(|d| d.finish).max().unwrap_or(0);
        SimResult {
            step_time_s: ps_to_secs(makespan),
            makespan_ps: makespan,
            devices: self
                .dev
                .iter()
                .map(|d| DeviceStats {
                    compute_busy_s: ps_to_secs(d.compute_busy),
                    comm_busy_s: ps_to_secs(d.comm_busy),
                    exposed_comm_s: ps_to_secs(d.exposed),
                    memory_high_water_bytes: d.high,
                    finish_s: ps_to_secs(d.finish),
                })
                .collect(),
            events: self.events,
            tasks: self.done as u64,
            trace: self.spans.take().map(|spans| Trace {
                spans,
                links: self.net.links().iter().map(|l| l.name()).collect(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::schedule::{KernelShape, Pass};

    fn label(name: &'static str) -> Label {
        Label {
            pass: Pass::Fwd,
            layer: Some(0),
            block: "attention",
            name,
            outer: None,
            step: None,
            micro_batch: 0,
        }
    }

    fn hw() -> Hardware {
        crate::sim::test_hardware()
    }

    fn hw_no_slowdown() -> Hardware {
        let mut h = hw();
        h.overlap_compute_slowdown_fraction.value = 0.0;
        h
    }

    /// An element-wise kernel moving `bytes`, as kernel 0 of a graph's table (see
    /// [`with_kernel`]), and its duration in ps on `hw`.
    fn kernel(hw: &Hardware, bytes: f64) -> (Work, SimTime) {
        let shape = KernelShape::Elementwise {
            bytes: bytes as u64,
        };
        let ps = secs_to_ps(CostModel::new(hw).kernel_s(&shape));
        (Work::Compute { kernel: 0 }, ps)
    }

    /// A graph over `devices` whose kernel 0 is [`kernel`]'s `bytes`.
    fn with_kernel(devices: u32, bytes: f64) -> TaskGraph {
        let mut g = TaskGraph::new(devices);
        g.add_kernel(KernelShape::Elementwise {
            bytes: bytes as u64,
        });
        g
    }

    fn send(to: u32, bytes: u64, tag: u64) -> Work {
        Work::Send { to, bytes, tag }
    }

    fn recv(from: u32, bytes: u64, tag: u64) -> Work {
        Work::Recv { from, bytes, tag }
    }

    /// Transfer time of `bytes` at `bw`, rounded up to the ps as the engine does.
    fn xfer_ps(bytes: f64, bw: f64) -> SimTime {
        (bytes / bw * 1e12).ceil() as SimTime
    }

    fn sim(g: &TaskGraph, hw: &Hardware, model: LinkModel) -> SimResult {
        simulate(g, hw, model, SimOptions::default()).unwrap()
    }

    #[test]
    fn empty_graph_takes_no_time() {
        let r = sim(&TaskGraph::new(2), &hw(), LinkModel::MaxMin);
        assert_eq!(r.makespan_ps, 0);
        assert_eq!(r.devices.len(), 2);
        assert_eq!(r.tasks, 0);
    }

    #[test]
    fn send_recv_takes_alpha_plus_bytes_over_bandwidth() {
        // Intra-node: α = 3 µs, B = 230 GB/s; 1e9 bytes -> 3 µs + 4.347826087 ms.
        let hw = hw();
        let mut g = TaskGraph::new(2);
        g.add(
            0,
            Stream::Comm(0),
            send(1, 1_000_000_000, 7),
            vec![],
            label("s"),
        );
        g.add(
            1,
            Stream::Comm(0),
            recv(0, 1_000_000_000, 7),
            vec![],
            label("r"),
        );
        for model in [LinkModel::Ideal, LinkModel::MaxMin] {
            let r = sim(&g, &hw, model);
            assert_eq!(r.makespan_ps, 3_000_000 + 4_347_826_087);
            assert_eq!(r.devices[0].comm_busy_s, r.step_time_s);
            assert_eq!(r.devices[0].exposed_comm_s, r.step_time_s);
        }
        // Inter-node, 16 devices on 2 nodes: α = 14 µs, B = 24 GB/s per NIC.
        let mut g = TaskGraph::new(16);
        g.add(
            3,
            Stream::Comm(0),
            send(11, 1_000_000_000, 0),
            vec![],
            label("s"),
        );
        g.add(
            11,
            Stream::Comm(0),
            recv(3, 1_000_000_000, 0),
            vec![],
            label("r"),
        );
        let r = sim(&g, &hw, LinkModel::MaxMin);
        assert_eq!(r.makespan_ps, 14_000_000 + xfer_ps(1e9, 24e9));
    }

    #[test]
    fn transfer_begins_at_rendezvous() {
        // The recv is posted after a kernel of c on device 1: the message starts at c.
        let hw = hw_no_slowdown();
        let (k, c) = kernel(&hw, 1e9);
        let mut g = with_kernel(2, 1e9);
        g.add(
            0,
            Stream::Comm(0),
            send(1, 230_000_000, 0),
            vec![],
            label("s"),
        );
        let pre = g.add(1, Stream::Compute, k, vec![], label("k"));
        g.add(
            1,
            Stream::Comm(0),
            recv(0, 230_000_000, 0),
            vec![pre],
            label("r"),
        );
        let r = sim(&g, &hw, LinkModel::MaxMin);
        assert_eq!(r.makespan_ps, c + 3_000_000 + 1_000_000_000);
        // Device 0's send waited c without being in flight.
        assert_eq!(
            r.devices[0].comm_busy_s,
            ps_to_secs(3_000_000 + 1_000_000_000)
        );
    }

    #[test]
    fn two_flows_out_of_one_egress_take_twice_as_long_with_maxmin() {
        // Device 0 sends 230 MB to devices 1 and 2 at once. Ideal: each flow at 230 GB/s,
        // α + 1 ms. MaxMin: they share gpu0's egress at 115 GB/s each, α + 2 ms.
        let hw = hw();
        let b = 230_000_000;
        let mut g = TaskGraph::new(3);
        g.add(0, Stream::Comm(0), send(1, b, 0), vec![], label("s1"));
        g.add(0, Stream::Comm(1), send(2, b, 0), vec![], label("s2"));
        g.add(1, Stream::Comm(0), recv(0, b, 0), vec![], label("r1"));
        g.add(2, Stream::Comm(0), recv(0, b, 0), vec![], label("r2"));
        let ideal = sim(&g, &hw, LinkModel::Ideal).makespan_ps;
        let maxmin = sim(&g, &hw, LinkModel::MaxMin).makespan_ps;
        assert_eq!(ideal, 3_000_000 + 1_000_000_000);
        assert_eq!(maxmin - 3_000_000, 2 * (ideal - 3_000_000));
    }

    #[test]
    fn gpus_on_one_rail_share_their_nic() {
        // 2 nodes of 8 GPUs. GPUs 0 and 1 of node 0 send 240 MB each to node 1 (GPUs 8, 9).
        // With 8 NICs they use NICs 0 and 1: 14 µs + 10 ms each. With 1 NIC per node both go
        // through NIC 0 at 12 GB/s each under max-min: 14 µs + 20 ms.
        let mut hw = hw();
        let b = 240_000_000;
        let mut g = TaskGraph::new(16);
        for (src, dst) in [(0, 8), (1, 9)] {
            g.add(src, Stream::Comm(0), send(dst, b, 0), vec![], label("s"));
            g.add(dst, Stream::Comm(0), recv(src, b, 0), vec![], label("r"));
        }
        assert_eq!(
            sim(&g, &hw, LinkModel::MaxMin).makespan_ps,
            14_000_000 + 10_000_000_000
        );
        hw.inter_node.nics_per_node = 1;
        assert_eq!(
            sim(&g, &hw, LinkModel::MaxMin).makespan_ps,
            14_000_000 + 20_000_000_000
        );
        assert_eq!(
            sim(&g, &hw, LinkModel::Ideal).makespan_ps,
            14_000_000 + 10_000_000_000
        );
    }

    #[test]
    fn collective_traffic_shares_links_with_point_to_point() {
        // All-gather of M over [0, 1] (one step: each rank sends M/2 to the other) while
        // device 0 also sends M/2 to device 1. MaxMin: the two 0 -> 1 flows share gpu0's egress
        // and gpu1's ingress at B/2, so both end at α + (M/2)/(B/2) = α + M/B; the 1 -> 0 flow
        // alone ends earlier. Ideal: everything ends at α + M/(2B).
        let hw = hw();
        let m = 460_000_000u64;
        let mut g = TaskGraph::new(2);
        for d in 0..2 {
            g.add(
                d,
                Stream::Comm(0),
                Work::Collective {
                    op: CollectiveOp::AllGather,
                    id: 9,
                    group: vec![0, 1],
                    bytes: m,
                },
                vec![],
                label("ag"),
            );
        }
        g.add(0, Stream::Comm(1), send(1, m / 2, 0), vec![], label("s"));
        g.add(1, Stream::Comm(1), recv(0, m / 2, 0), vec![], label("r"));
        assert_eq!(
            sim(&g, &hw, LinkModel::Ideal).makespan_ps,
            3_000_000 + 1_000_000_000
        );
        assert_eq!(
            sim(&g, &hw, LinkModel::MaxMin).makespan_ps,
            3_000_000 + 2_000_000_000
        );
    }

    /// A 2-device ring with a real double buffer, `steps` steps. At step k each device computes
    /// on block k (buffer k % 2, compute stream) while it sends block k to its peer (comm 0)
    /// and receives block k+1 into buffer (k+1) % 2 (comm 1). Dependencies: compute k needs
    /// recv k-1 (its block arrived); send k needs recv k-1 (it forwards that block); recv k
    /// needs compute k-1 (it overwrites the buffer compute k-1 read). No transfer in the last
    /// step.
    fn double_buffered_ring(steps: u32, kernel: &Work, bytes: u64) -> TaskGraph {
        let mut g = TaskGraph::new(2);
        let mut prev_recv = [None::<TaskId>; 2];
        let mut prev_comp = [None::<TaskId>; 2];
        for k in 0..steps {
            let mut recvs = [None; 2];
            for d in 0..2u32 {
                let deps: Vec<TaskId> = prev_recv[d as usize].into_iter().collect();
                let c = g.add(
                    d,
                    Stream::Compute,
                    kernel.clone(),
                    deps.clone(),
                    label("attn"),
                );
                if k + 1 < steps {
                    g.add(
                        d,
                        Stream::Comm(0),
                        send(1 - d, bytes, k as u64),
                        deps,
                        label("kv-send"),
                    );
                    let rdeps: Vec<TaskId> = prev_comp[d as usize].into_iter().collect();
                    recvs[d as usize] = Some(g.add(
                        d,
                        Stream::Comm(1),
                        recv(1 - d, bytes, k as u64),
                        rdeps,
                        label("kv-recv"),
                    ));
                }
                prev_comp[d as usize] = Some(c);
            }
            prev_recv = recvs;
        }
        g
    }

    #[test]
    fn double_buffered_ring_overlaps_compute_and_transfer() {
        // Derivation (no slowdown): let c = kernel time, m = α + bytes/B. Transfer k runs from
        // max(end of transfer k-1, end of compute k-1) and compute k from max(end of compute
        // k-1, end of transfer k-1), so each step costs max(c, m) and the makespan is
        // (S-1)·max(c, m) + c. Per device: compute busy S·c; comm busy (S-1)·m; exposed
        // (S-1)·max(0, m - c).
        let hw = hw_no_slowdown();
        let s = 6u64;
        let bytes = 230_000_000u64; // m = 3 µs + 1 ms
        let m = 3_000_000 + 1_000_000_000u64;
        for kernel_bytes in [0.5e9, 3.3e9] {
            let (k, c) = kernel(&hw, kernel_bytes);
            let mut g = double_buffered_ring(s as u32, &k, bytes);
            g.add_kernel(KernelShape::Elementwise {
                bytes: kernel_bytes as u64,
            });
            g.check().unwrap();
            for model in [LinkModel::Ideal, LinkModel::MaxMin] {
                let r = sim(&g, &hw, model);
                assert_eq!(r.makespan_ps, (s - 1) * c.max(m) + c, "c = {c}, m = {m}");
                for d in &r.devices {
                    assert_eq!(d.compute_busy_s, ps_to_secs(s * c));
                    assert_eq!(d.comm_busy_s, ps_to_secs((s - 1) * m));
                    assert_eq!(d.exposed_comm_s, ps_to_secs((s - 1) * m.saturating_sub(c)));
                }
            }
        }
    }

    #[test]
    fn compute_slows_while_a_transfer_runs() {
        // Slowdown s = 0.1 (profile value). A kernel of c on device 0 runs beside a send of m.
        // m < c: during [0, m] the kernel does (1 - s)·m of work, then the rest at full speed:
        // it ends at m + c - round((1 - s)·m) ≈ c + s·m.
        // m > c: the kernel runs at 1 - s throughout and ends at ceil(c / (1 - s)).
        let hw = hw();
        assert_eq!(hw.overlap_compute_slowdown_fraction.value, 0.1);
        for (kernel_bytes, msg) in [(3.3e9, 230_000_000u64), (0.3e9, 460_000_000)] {
            let (k, c) = kernel(&hw, kernel_bytes);
            let mut g = with_kernel(2, kernel_bytes);
            let kt = g.add(0, Stream::Compute, k, vec![], label("gemm"));
            g.add(0, Stream::Comm(0), send(1, msg, 0), vec![], label("s"));
            g.add(1, Stream::Comm(0), recv(0, msg, 0), vec![], label("r"));
            let r = simulate(&g, &hw, LinkModel::MaxMin, SimOptions { trace: true }).unwrap();
            let m = 3_000_000 + xfer_ps(msg as f64, 230e9);
            let end = r
                .trace
                .unwrap()
                .spans
                .iter()
                .find(|sp| sp.task == kt)
                .unwrap()
                .end_ps;
            let want = if m < c {
                m + c - (m as f64 * 0.9).round() as u64
            } else {
                (c as f64 / 0.9).ceil() as u64
            };
            assert_eq!(end, want, "c = {c}, m = {m}");
            assert!(end > c);
            // Exposed communication only where the kernel is not running.
            assert_eq!(
                r.devices[0].exposed_comm_s,
                ps_to_secs(m.saturating_sub(end))
            );
        }
    }

    /// A graph with everything: compute, p2p with contention, collectives, memory.
    fn busy_graph() -> TaskGraph {
        let hw = hw();
        let (k, _) = kernel(&hw, 1e8);
        let n = 4;
        let mut g = with_kernel(n, 1e8);
        let mut last = vec![None::<TaskId>; n as usize];
        for step in 0..5u64 {
            for d in 0..n {
                let deps: Vec<TaskId> = last[d as usize].into_iter().collect();
                let a = g.add(
                    d,
                    Stream::Compute,
                    Work::Alloc {
                        bytes: 1 << 20,
                        tensor: "buf",
                    },
                    deps,
                    label("alloc"),
                );
                let c = g.add(d, Stream::Compute, k.clone(), vec![a], label("attn"));
                g.add(
                    d,
                    Stream::Comm(0),
                    send((d + 1) % n, 50_000_000, step),
                    vec![a],
                    label("s"),
                );
                g.add(
                    d,
                    Stream::Comm(3),
                    send((d + 2) % n, 30_000_000, 100 + step),
                    vec![a],
                    label("s2"),
                );
                let r1 = g.add(
                    d,
                    Stream::Comm(1),
                    recv((d + n - 1) % n, 50_000_000, step),
                    vec![],
                    label("r"),
                );
                let r2 = g.add(
                    d,
                    Stream::Comm(4),
                    recv((d + n - 2) % n, 30_000_000, 100 + step),
                    vec![],
                    label("r2"),
                );
                let ar = g.add(
                    d,
                    Stream::Comm(2),
                    Work::Collective {
                        op: CollectiveOp::AllReduce,
                        id: step,
                        group: (0..n).collect(),
                        bytes: 80_000_000,
                    },
                    vec![c],
                    label("ar"),
                );
                let f = g.add(
                    d,
                    Stream::Compute,
                    Work::Free {
                        bytes: 1 << 20,
                        tensor: "buf",
                    },
                    vec![r1, r2, ar],
                    label("free"),
                );
                last[d as usize] = Some(f);
            }
        }
        g
    }

    #[test]
    fn same_graph_gives_identical_results() {
        let g = busy_graph();
        g.check().unwrap();
        let hw = hw();
        let opts = SimOptions { trace: true };
        let a = simulate(&g, &hw, LinkModel::MaxMin, opts).unwrap();
        let b = simulate(&g, &hw, LinkModel::MaxMin, opts).unwrap();
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&b).unwrap()
        );
        let ta = crate::sim::chrome_trace_json(a.trace.as_ref().unwrap(), g.devices);
        let tb = crate::sim::chrome_trace_json(b.trace.as_ref().unwrap(), g.devices);
        assert_eq!(ta, tb);
        assert_eq!(a.tasks, g.tasks.len() as u64);
        // Contention makes MaxMin slower than Ideal on this graph.
        let ideal = simulate(&g, &hw, LinkModel::Ideal, opts).unwrap();
        assert!(
            ideal.makespan_ps < a.makespan_ps,
            "{} vs {}",
            ideal.makespan_ps,
            a.makespan_ps
        );
        // The trace is independent of whether it was asked for.
        let plain = simulate(&g, &hw, LinkModel::MaxMin, SimOptions::default()).unwrap();
        assert_eq!(plain.makespan_ps, a.makespan_ps);
        assert_eq!(plain.devices, a.devices);
    }

    #[test]
    fn deadlock_is_detected_and_names_the_tasks() {
        // Device 0 posts a recv (task 0). Device 1's matching send (task 2) is queued behind a
        // kernel (task 1) that depends on that recv.
        let hw = hw();
        let (k, _) = kernel(&hw, 1e6);
        let mut g = with_kernel(2, 1e6);
        let r = g.add(
            0,
            Stream::Comm(0),
            recv(1, 1000, 5),
            vec![],
            label("kv-recv"),
        );
        g.add(1, Stream::Compute, k, vec![r], label("attn"));
        g.add(
            1,
            Stream::Compute,
            send(0, 1000, 5),
            vec![],
            label("kv-send"),
        );
        g.check().unwrap();
        let err = simulate(&g, &hw, LinkModel::MaxMin, SimOptions::default()).unwrap_err();
        let Error::Deadlock { message } = &err else {
            panic!("expected a deadlock, got {err}");
        };
        assert!(
            message.starts_with("3 of 3 tasks never finished"),
            "{message}"
        );
        assert!(
            message.contains(
                "task 0 (fwd.L0.attention.kv-recv on device 0 comm0) receives from device 1 \
                 (tag 5) and waits for its send, task 2 (fwd.L0.attention.kv-send on device 1 \
                 compute), which is queued behind task 1"
            ),
            "{message}"
        );
        assert!(
            message.contains("task 1 (fwd.L0.attention.attn on device 1 compute) waits for task 0"),
            "{message}"
        );
        assert_eq!(err.exit_code(), 1);
        assert!(err.to_string().starts_with("deadlock: "));
    }

    #[test]
    fn collective_deadlock_names_the_missing_rank() {
        // Rank 1 of an all-reduce waits behind a recv that nobody sends... to device 1 from
        // device 0, whose send is behind the all-reduce on device 0's stream.
        let hw = hw();
        let ar = Work::Collective {
            op: CollectiveOp::AllReduce,
            id: 3,
            group: vec![0, 1],
            bytes: 1000,
        };
        let mut g = TaskGraph::new(2);
        g.add(0, Stream::Comm(0), ar.clone(), vec![], label("ar"));
        g.add(0, Stream::Comm(0), send(1, 8, 0), vec![], label("s"));
        g.add(1, Stream::Comm(0), recv(0, 8, 0), vec![], label("r"));
        g.add(1, Stream::Comm(0), ar, vec![], label("ar"));
        let err = simulate(&g, &hw, LinkModel::Ideal, SimOptions::default()).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("waits for the other ranks of collective 3: task 3"),
            "{msg}"
        );
        assert!(msg.contains("is queued behind task 2"), "{msg}");
    }

    #[test]
    fn memory_high_water_from_alloc_and_free() {
        // Device 0: +100, +50 (150 live: the peak), -100, +80 (130 live). Device 1: +10, -10.
        let hw = hw();
        let mut g = TaskGraph::new(2);
        let al = |bytes| Work::Alloc { bytes, tensor: "t" };
        let fr = |bytes| Work::Free { bytes, tensor: "t" };
        g.add(0, Stream::Compute, al(100), vec![], label("a"));
        g.add(0, Stream::Comm(0), al(50), vec![0], label("a"));
        g.add(0, Stream::Compute, fr(100), vec![1], label("f"));
        g.add(0, Stream::Compute, al(80), vec![], label("a"));
        g.add(1, Stream::Compute, al(10), vec![], label("a"));
        g.add(1, Stream::Compute, fr(10), vec![], label("f"));
        let r = sim(&g, &hw, LinkModel::MaxMin);
        assert_eq!(r.devices[0].memory_high_water_bytes, 150);
        assert_eq!(r.devices[1].memory_high_water_bytes, 10);
        assert_eq!(r.max_memory_high_water_bytes(), 150);
        assert_eq!(r.makespan_ps, 0);

        // Freeing more than is live is an error naming the task.
        let mut g = TaskGraph::new(1);
        g.add(0, Stream::Compute, al(10), vec![], label("a"));
        g.add(0, Stream::Compute, fr(11), vec![], label("f"));
        let err = simulate(&g, &hw, LinkModel::MaxMin, SimOptions::default()).unwrap_err();
        assert!(matches!(err, Error::InvalidGraph { .. }), "{err}");
        assert!(err.to_string().contains("task 1 frees 11 bytes"), "{err}");
    }

    #[test]
    fn malformed_graphs_are_rejected() {
        let hw = hw();
        let mut g = TaskGraph::new(2);
        g.add(0, Stream::Comm(0), send(1, 8, 0), vec![], label("s"));
        let err = simulate(&g, &hw, LinkModel::MaxMin, SimOptions::default()).unwrap_err();
        assert!(
            err.to_string()
                .contains("send task 0 (0 -> 1, tag 0) has no matching recv"),
            "{err}"
        );
        let mut g = TaskGraph::new(2);
        g.add(0, Stream::Comm(0), send(1, 8, 0), vec![], label("s"));
        g.add(1, Stream::Comm(0), recv(0, 9, 0), vec![], label("r"));
        let err = simulate(&g, &hw, LinkModel::MaxMin, SimOptions::default()).unwrap_err();
        assert!(err.to_string().contains("carries 8 bytes"), "{err}");
        let mut g = TaskGraph::new(2);
        g.add(
            0,
            Stream::Compute,
            Work::Compute { kernel: 3 },
            vec![],
            label("k"),
        );
        let err = simulate(&g, &hw, LinkModel::MaxMin, SimOptions::default()).unwrap_err();
        assert!(
            err.to_string().contains("runs kernel 3 of a table of 0"),
            "{err}"
        );
        let mut g = TaskGraph::new(2);
        g.add(
            0,
            Stream::Comm(0),
            Work::Collective {
                op: CollectiveOp::Broadcast { root: 1 },
                id: 0,
                group: vec![0],
                bytes: 8,
            },
            vec![],
            label("b"),
        );
        let err = simulate(&g, &hw, LinkModel::MaxMin, SimOptions::default()).unwrap_err();
        assert!(
            err.to_string().contains("root 1 is not in its group"),
            "{err}"
        );
        let err = simulate(
            &TaskGraph::new(u32::MAX),
            &hw,
            LinkModel::MaxMin,
            SimOptions::default(),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("more than the simulator handles"),
            "{err}"
        );
    }

    #[test]
    fn self_send_and_zero_bytes_take_no_bandwidth_time() {
        // A device sending to itself costs nothing; a zero-byte message costs α only.
        let hw = hw();
        let mut g = TaskGraph::new(2);
        g.add(0, Stream::Comm(0), send(0, 1 << 30, 0), vec![], label("s"));
        g.add(0, Stream::Comm(1), recv(0, 1 << 30, 0), vec![], label("r"));
        assert_eq!(sim(&g, &hw, LinkModel::MaxMin).makespan_ps, 0);
        let mut g = TaskGraph::new(2);
        g.add(0, Stream::Comm(0), send(1, 0, 0), vec![], label("s"));
        g.add(1, Stream::Comm(1), recv(0, 0, 0), vec![], label("r"));
        assert_eq!(sim(&g, &hw, LinkModel::MaxMin).makespan_ps, 3_000_000);
    }
}
