//! Lowering a [`StepPlan`] to a [`TaskGraph`] over a workload's devices.
//!
//! Streams: the compute stream; communication streams 0/1 (ring prefetch send/recv), 2/3
//! (ring accumulator send/recv), 4/5 (outer-loop weight send/recv or broadcast), 6/7
//! (outer-loop gradient send/recv or reduce), 8 (collectives the compute stream waits for), 9
//! (gradient synchronisation, asynchronous until the optimizer step), 10/11 (pipeline
//! activations sent to the next stage / received from the previous one) and 12/13 (their
//! gradients, the other way).
//!
//! Devices: [`Devices::All`] lays out every device of the cluster (p · cp · dp · pp, device id
//! = cluster rank, `config::layout`); [`Devices::Distinct`] one device per distinct program
//! (`devices`: data-parallel replicas, and symmetric method or context ranks, folded where the
//! fold is exact), with the graph's [`super::Placement`] saying whom each stands for.
//!
//! Pipeline (`pipeline`): each stage's devices run the stage's 1F1B order; a forward waits for
//! the activation of the previous virtual stage (received on its own stream, posted ahead),
//! runs its chunk's layers (the embedding first on the first virtual stage, the head and loss
//! last on the last) and sends its output on; a backward waits for the gradient from the next
//! virtual stage and sends the input gradient back. Each layer's gradients are synchronised
//! over the devices holding the same weights after its last micro-batch's backward, on an
//! asynchronous stream the optimizer waits for; tied embeddings are all-reduced between the
//! first and the last stage. Without a pipeline this is one stage running forward then
//! backward per micro-batch.
//!
//! Memory: every device allocates its stage's static bytes and the runtime's reserved bytes at
//! the start, the embedding's (first virtual stage) and the head's (last) stored inputs and
//! each layer's stored activations when a micro-batch's forward reaches them (freed when its
//! backward has passed), and each phase's transient working set for the duration of that phase
//! — all figures taken from the stage's memory inventory, so the simulated high-water mark is
//! the inventory's peak. A phase ends when all of its tasks on that device have finished, so
//! nothing of one phase overlaps the next.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::graph::{
    CollectiveOp, DeviceId, KernelId, Label, Pass, Stream, TaskGraph, TaskId, Work,
};
use super::shape::KernelShape;
use super::stage::{Axis, Exchange, Kernel, Outer, PhaseBlock, Ring, Stage, StepPlan};
use crate::config::{Axes, Coord, ValidWorkload};
use crate::memory::Inventory;

mod devices;
mod periodic;
mod pipeline;
mod ring;
mod size;
mod sync;

pub use devices::Devices;

pub use size::{
    graph_size, op_program_size, GraphSize, OpProgram, ProgramSize, GRAPH_BYTES_PER_TASK,
};

/// What to include in the lowered graph.
#[derive(Debug, Clone, Copy)]
pub struct LowerOptions {
    /// Every device, or one per distinct program.
    pub devices: Devices,
    /// Include alloc/free tasks.
    pub memory: bool,
    /// Include the optimizer step.
    pub optimizer: bool,
    /// Which repeating rounds to declare in the graph ([`super::Periodic`]).
    pub rounds: Rounds,
}

impl LowerOptions {
    /// Distinct programs, memory and optimizer included: what a simulation of a step needs.
    pub fn step() -> LowerOptions {
        LowerOptions {
            devices: Devices::Distinct,
            memory: true,
            optimizer: true,
            rounds: Rounds::None,
        }
    }
}

/// Which repeating rounds a lowering declares in its graph ([`super::Periodic`]), for the
/// simulator to prove the step periodic there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Rounds {
    /// None.
    #[default]
    None,
    /// Each forward and each backward run of layers, one round per layer (a step without a
    /// pipeline: one stage).
    Layers,
    /// The steady rounds of each stage's 1F1B order ([`crate::config::steady_rounds`]), one
    /// segment per stage.
    MicroBatches,
}

/// Where one pipeline op's tasks start in the graph, and its layers'.
#[derive(Debug, Clone, Default)]
struct OpMarks {
    start: TaskId,
    layers: Vec<TaskId>,
    layers_end: TaskId,
}

/// The op marks of one stage, and where its ops end.
#[derive(Debug, Clone, Default)]
struct StageMarks {
    ops: Vec<OpMarks>,
    end: TaskId,
}

const PRE_SEND: Stream = Stream::Comm(0);
const PRE_RECV: Stream = Stream::Comm(1);
const ACC_SEND: Stream = Stream::Comm(2);
const ACC_RECV: Stream = Stream::Comm(3);
const W_SEND: Stream = Stream::Comm(4);
const W_RECV: Stream = Stream::Comm(5);
const G_SEND: Stream = Stream::Comm(6);
const G_RECV: Stream = Stream::Comm(7);
const BLOCKING: Stream = Stream::Comm(8);
const ASYNC: Stream = Stream::Comm(9);
const PP_SEND_FWD: Stream = Stream::Comm(10);
const PP_RECV_FWD: Stream = Stream::Comm(11);
const PP_SEND_BWD: Stream = Stream::Comm(12);
const PP_RECV_BWD: Stream = Stream::Comm(13);
/// ZeRO-3's weight all-gathers, one layer ahead of the compute (`lower::sync`).
const ZERO3_GATHER: Stream = Stream::Comm(14);
/// The compute stream and communication streams 0–14.
const STREAMS: usize = 16;

fn stream_slot(s: Stream) -> usize {
    match s {
        Stream::Compute => 0,
        Stream::Comm(n) => 1 + (n as usize).min(STREAMS - 2),
    }
}

/// A multiply-rotate hasher (the Fx hash of rustc) for the kernel table: every compute task
/// looks its shape up, and the standard SipHash would cost a noticeable share of the lowering.
/// Only lookups depend on it, never an iteration order.
#[derive(Default)]
struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(w));
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u8(&mut self, x: u8) {
        self.write_u64(u64::from(x));
    }
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

struct Lower<'a> {
    g: TaskGraph,
    w: &'a ValidWorkload,
    axes: Axes,
    /// Coordinates of each simulated device.
    coords: Vec<Coord>,
    /// Cluster rank of each simulated device.
    ranks: Vec<DeviceId>,
    /// For each cluster rank, the simulated device running its program.
    rep: Vec<DeviceId>,
    /// The simulated devices of the stage being lowered.
    active: Vec<DeviceId>,
    /// The memory inventory of the stage being lowered.
    inv: &'a Inventory,
    memory: bool,
    /// Messages to other stages and the embedding group's all-reduce (off: one stage's ops
    /// alone, [`lower_ops`]).
    messages: bool,
    next_id: u64,
    label: Label,
    /// Per device: what the next compute task must wait for.
    frontier: Vec<Vec<TaskId>>,
    /// Per device: the lock-step pipeline send still pending, which the next receive does not
    /// wait for (`PipeP2p::Lockstep`, `lower::pipeline`).
    pending_sends: Vec<Vec<TaskId>>,
    /// Per device: the last compute-stream task (stream order already makes the next compute
    /// task wait for it, so it is left out of dependency lists).
    last_compute: Vec<Option<TaskId>>,
    /// Per device and stream: the last task of the current phase on that stream. Streams run in
    /// order, so the phase's end waits for these and thereby for every task of the phase.
    phase_tasks: Vec<[Option<TaskId>; STREAMS]>,
    /// Kernel shapes already in the graph's table.
    kernel_ids: HashMap<KernelShape, KernelId, BuildHasherDefault<FxHasher>>,
    /// The same, by the address of the plan's `Kernel` (every layer and device lowers the same
    /// plan objects, and the plan is borrowed for the whole lowering): one word to hash.
    kernel_at: HashMap<usize, KernelId, BuildHasherDefault<FxHasher>>,
    /// Per stage lowered, where its ops and layers start (when rounds are declared).
    marks: Option<Vec<StageMarks>>,
}

impl<'a> Lower<'a> {
    fn sim_devices(&self) -> usize {
        self.coords.len()
    }

    /// The cluster rank of the device at `c`.
    fn rank_at(&self, c: Coord) -> DeviceId {
        self.axes.rank_of(c)
    }

    /// Whether cluster rank `r` is simulated as itself.
    fn canonical(&self, r: DeviceId) -> bool {
        self.ranks[self.rep[r as usize] as usize] == r
    }

    /// The simulated devices taking part for cluster ranks `group` (its canonical members).
    fn members(&self, group: &[DeviceId]) -> Vec<DeviceId> {
        group
            .iter()
            .filter(|&&r| self.canonical(r))
            .map(|&r| self.rep[r as usize])
            .collect()
    }

    /// The cluster ranks of the method group (or the context-parallel group) of device `dev`,
    /// in ring order.
    fn group_of(&self, dev: DeviceId, axis: Axis) -> Vec<DeviceId> {
        let c = self.coords[dev as usize];
        match axis {
            Axis::Method => (0..self.axes.p)
                .map(|rank| self.rank_at(Coord { rank, ..c }))
                .collect(),
            Axis::Context => (0..self.axes.cp)
                .map(|cp| self.rank_at(Coord { cp, ..c }))
                .collect(),
        }
    }

    /// The distinct groups of `axis` among the active devices, in order of first appearance.
    fn active_groups(&self, axis: Axis) -> Vec<Vec<DeviceId>> {
        let mut out: Vec<Vec<DeviceId>> = Vec::new();
        for &dev in &self.active {
            let g = self.group_of(dev, axis);
            if !out.contains(&g) {
                out.push(g);
            }
        }
        out
    }

    /// The frontier of the active devices (indexed by device; the others' left empty): what
    /// a stage's ring or collective starts from, without copying every stage's frontier.
    fn active_frontier(&self) -> Vec<Vec<TaskId>> {
        let mut out = vec![Vec::new(); self.sim_devices()];
        for &d in &self.active {
            out[d as usize].clone_from(&self.frontier[d as usize]);
        }
        out
    }

    fn fresh(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn add(&mut self, dev: DeviceId, stream: Stream, work: Work, deps: Vec<TaskId>) -> TaskId {
        let id = self.g.add(dev, stream, work, deps, self.label);
        self.phase_tasks[dev as usize][stream_slot(stream)] = Some(id);
        id
    }

    fn mem(&mut self, dev: DeviceId, alloc: bool, bytes: u128, tensor: &'static str) {
        if !self.memory || bytes == 0 {
            return;
        }
        let work = if alloc {
            Work::Alloc { bytes, tensor }
        } else {
            Work::Free { bytes, tensor }
        };
        let deps = self.compute_deps(dev as usize, &[]);
        let id = self.g.add(dev, Stream::Compute, work, deps, self.label);
        self.set_compute_frontier(dev as usize, id);
    }

    /// Dependencies of the next compute-stream task: the frontier and `extra`, without the
    /// previous compute task (implied by stream order) — so a chain of kernels needs no
    /// dependency list at all.
    fn compute_deps(&self, dev: usize, extra: &[TaskId]) -> Vec<TaskId> {
        let last = self.last_compute[dev];
        let frontier = &self.frontier[dev];
        if extra.is_empty() && frontier.iter().all(|&t| Some(t) == last) {
            return Vec::new();
        }
        frontier
            .iter()
            .copied()
            .filter(|&t| Some(t) != last)
            .chain(extra.iter().copied())
            .collect()
    }

    /// After a compute-stream task: it is the frontier and the last compute task.
    fn set_compute_frontier(&mut self, dev: usize, id: TaskId) {
        let f = &mut self.frontier[dev];
        f.clear();
        f.push(id);
        self.last_compute[dev] = Some(id);
    }

    fn kernel_id(&mut self, k: &Kernel) -> KernelId {
        let at = k as *const Kernel as usize;
        if let Some(&id) = self.kernel_at.get(&at) {
            debug_assert_eq!(self.g.kernels[id as usize], k.shape);
            return id;
        }
        let id = match self.kernel_ids.get(&k.shape) {
            Some(&id) => id,
            None => {
                let id = self.g.add_kernel(k.shape);
                self.kernel_ids.insert(k.shape, id);
                id
            }
        };
        self.kernel_at.insert(at, id);
        id
    }

    fn kernels(&mut self, dev: DeviceId, kernels: &[Kernel], extra: &[TaskId]) {
        let mut any = false;
        for k in kernels {
            if k.shape.is_empty() {
                continue;
            }
            any = true;
            let deps = self.compute_deps(dev as usize, extra);
            self.label.name = k.name;
            let kernel = self.kernel_id(k);
            let id = self.add(dev, Stream::Compute, Work::Compute { kernel }, deps);
            self.set_compute_frontier(dev as usize, id);
        }
        if !any {
            self.frontier[dev as usize].extend_from_slice(extra);
        }
    }

    /// One collective over each method group of the active devices, on `stream`; returns
    /// each simulated device's task (indexed by device; only the active members are set).
    fn collective(
        &mut self,
        name: &'static str,
        op: CollectiveOp,
        bytes: u64,
        stream: Stream,
        deps: &[Vec<TaskId>],
    ) -> Vec<TaskId> {
        self.collective_with(name, op, bytes, stream, |_, dev| deps[dev].clone())
    }

    /// [`Lower::collective`] with each device's dependencies from `deps_of(self, device)`
    /// (a stage's collective takes each device's frontier without copying every device's).
    fn collective_with(
        &mut self,
        name: &'static str,
        op: CollectiveOp,
        bytes: u64,
        stream: Stream,
        deps_of: impl Fn(&Self, usize) -> Vec<TaskId>,
    ) -> Vec<TaskId> {
        self.label.name = name;
        let mut out = vec![0; self.sim_devices()];
        for group in self.active_groups(Axis::Method) {
            let id = self.fresh();
            let op = match op {
                CollectiveOp::Broadcast { root } => CollectiveOp::Broadcast {
                    root: group[root as usize],
                },
                CollectiveOp::Reduce { root } => CollectiveOp::Reduce {
                    root: group[root as usize],
                },
                o => o,
            };
            for dev in self.members(&group) {
                let deps = deps_of(self, dev as usize);
                out[dev as usize] = self.add(
                    dev,
                    stream,
                    Work::Collective {
                        op,
                        id,
                        group: group.clone(),
                        bytes,
                    },
                    deps,
                );
            }
        }
        out
    }

    fn stage(&mut self, stage: &Stage) {
        match stage {
            Stage::Compute(kernels) => {
                for i in 0..self.active.len() {
                    self.kernels(self.active[i], kernels, &[]);
                }
            }
            Stage::Collective { name, op, bytes } => {
                if self.axes.p > 1 {
                    let ids = self.collective_with(name, *op, *bytes, BLOCKING, |l, dev| {
                        l.frontier[dev].clone()
                    });
                    for i in 0..self.active.len() {
                        let dev = self.active[i] as usize;
                        let f = &mut self.frontier[dev];
                        f.clear();
                        f.push(ids[dev]);
                    }
                }
            }
            Stage::Ring(ring) => self.ring(ring),
            Stage::Outer(outer) => self.outer(outer),
        }
    }

    fn phase(&mut self, b: &PhaseBlock, pass: Pass, layer: Option<u32>) {
        self.label.pass = pass;
        self.label.layer = layer;
        self.label.block = b.block;
        let bytes = self.inv.transient_bytes(b.phase);
        for i in 0..self.active.len() {
            let dev = self.active[i];
            self.phase_tasks[dev as usize] = [None; STREAMS];
            self.label.name = b.phase.name();
            self.mem(dev, true, bytes, b.phase.name());
        }
        for s in &b.stages {
            self.stage(s);
        }
        for i in 0..self.active.len() {
            let dev = self.active[i];
            let d = dev as usize;
            let mut deps: Vec<TaskId> =
                std::mem::replace(&mut self.phase_tasks[d], [None; STREAMS])
                    .into_iter()
                    .flatten()
                    .collect();
            deps.extend(self.frontier[d].iter().copied());
            deps.sort_unstable();
            deps.dedup();
            // The free always exists (with 0 bytes when memory is off or the phase has no
            // transients): it is the join that makes the next phase start after this one.
            self.label.name = b.phase.name();
            let freed = if self.memory { bytes } else { 0 };
            let id = self.g.add(
                dev,
                Stream::Compute,
                Work::Free {
                    bytes: freed,
                    tensor: b.phase.name(),
                },
                deps,
                self.label,
            );
            self.set_compute_frontier(d, id);
        }
    }
}

/// Lowers a plan into a task graph; `stages` (one memory inventory per pipeline stage,
/// `memory::stage_inventories`) supply the alloc/free sizes.
pub fn lower(
    w: &ValidWorkload,
    plan: &StepPlan,
    stages: &[Inventory],
    opts: LowerOptions,
) -> TaskGraph {
    let estimate = graph_size(w, plan, opts.devices).tasks;
    let mut l = Lower::new(w, plan, stages, opts, estimate);
    for (stage, inv) in stages.iter().enumerate() {
        l.begin_stage(stage as u32, inv);
        l.stage_step(plan, stage as u32, None, opts.optimizer);
    }
    l.finish(opts, estimate)
}

/// Lowers `ops` of stage `stage` alone, on that stage's devices: their layers, embedding, head
/// and gradient synchronisations (a backward of the last micro-batch synchronises), without
/// the messages to other stages, the embedding group's all-reduce, the optimizer or memory —
/// one pipeline op's program, to simulate once and compose (`sim::compose`).
pub fn lower_ops(
    w: &ValidWorkload,
    plan: &StepPlan,
    stages: &[Inventory],
    stage: u32,
    ops: &[crate::config::PipeOp],
    opts: LowerOptions,
) -> TaskGraph {
    let opts = LowerOptions {
        memory: false,
        optimizer: false,
        ..opts
    };
    let mut l = Lower::new(w, plan, stages, opts, 0);
    l.messages = false;
    l.begin_stage(stage, &stages[stage as usize]);
    l.stage_step(plan, stage, Some(ops), false);
    l.finish(opts, u64::MAX)
}

impl<'a> Lower<'a> {
    fn new(
        w: &'a ValidWorkload,
        plan: &StepPlan,
        stages: &'a [Inventory],
        opts: LowerOptions,
        capacity: u64,
    ) -> Lower<'a> {
        assert_eq!(
            stages.len() as u64,
            w.outer.pp,
            "one memory inventory per pipeline stage"
        );
        let map = devices::device_map(w, plan, opts.devices);
        let n = map.coords.len();
        // The estimate bounds what is built (and is at most twice it), so the task list is
        // allocated once; large graphs otherwise spend a noticeable share of their build time
        // growing and copying it. Capped, as callers outside the simulator's guard may be large.
        let mut g = TaskGraph::with_capacity(
            n as u32,
            capacity.min(crate::config::limits::MAX_GRAPH_TASKS) as usize,
        );
        g.placement = map.placement();
        Lower {
            g,
            w,
            axes: w.axes(),
            coords: map.coords,
            ranks: map.ranks,
            rep: map.representative,
            active: Vec::new(),
            inv: &stages[0],
            memory: opts.memory,
            messages: true,
            next_id: 0,
            label: Label {
                pass: Pass::Fwd,
                layer: None,
                block: "step",
                name: "start",
                outer: None,
                step: None,
                micro_batch: 0,
            },
            frontier: vec![Vec::new(); n],
            pending_sends: vec![Vec::new(); n],
            last_compute: vec![None; n],
            phase_tasks: vec![[None; STREAMS]; n],
            kernel_ids: HashMap::default(),
            kernel_at: HashMap::default(),
            marks: (opts.rounds != Rounds::None).then(Vec::new),
        }
    }

    /// Makes stage `stage`'s devices the active ones, with its inventory.
    fn begin_stage(&mut self, stage: u32, inv: &'a Inventory) {
        self.inv = inv;
        self.active = (0..self.coords.len() as DeviceId)
            .filter(|&d| self.coords[d as usize].stage == stage)
            .collect();
    }

    fn finish(mut self, opts: LowerOptions, estimate: u64) -> TaskGraph {
        // The estimate the simulator's guard checks before building must bound what was built.
        debug_assert!(
            self.g.tasks.len() as u64 <= estimate,
            "graph_size underestimates: {} tasks built",
            self.g.tasks.len()
        );
        if let Some(marks) = self.marks.take() {
            self.g.periodic = periodic::declare(self.w, &marks, opts.rounds);
        }
        self.g
    }
}
