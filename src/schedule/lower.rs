//! Lowering a [`StepPlan`] to a [`TaskGraph`] over p × dp devices.
//!
//! Streams: the compute stream; communication streams 0/1 (ring prefetch send/recv), 2/3
//! (ring accumulator send/recv), 4/5 (outer-loop weight send/recv or broadcast), 6/7
//! (outer-loop gradient send/recv or reduce), 8 (collectives the compute stream waits for) and
//! 9 (gradient synchronisation, asynchronous until the optimizer step).
//!
//! Memory: every device allocates its static bytes and the runtime's reserved bytes at the
//! start, the embedding and head activations for the whole step, each layer's stored
//! activations when its forward begins (freed when its backward ends), and each phase's
//! transient working set for the duration of that phase — all figures taken from the memory
//! inventory, so the simulated high-water mark is the inventory's peak. A phase ends when all
//! of its tasks on that device have finished, so nothing of one phase overlaps the next.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::graph::{
    CollectiveOp, DeviceId, KernelId, Label, Pass, Stream, TaskGraph, TaskId, Work,
};
use super::shape::KernelShape;
use super::stage::{Exchange, Kernel, Outer, PhaseBlock, Ring, Stage, StepPlan};
use crate::memory::Inventory;

mod ring;
mod size;
mod sync;

pub use size::{graph_size, GraphSize, GRAPH_BYTES_PER_TASK};

use sync::{grad_sync_collective, zero3_gather};

/// What to include in the lowered graph.
#[derive(Debug, Clone, Copy)]
pub struct LowerOptions {
    /// Data-parallel replicas to lay out (each with p devices).
    pub dp: u32,
    /// Include alloc/free tasks.
    pub memory: bool,
    /// Include the optimizer step.
    pub optimizer: bool,
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
/// The compute stream and communication streams 0–9.
const STREAMS: usize = 11;

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
    p: u32,
    dp: u32,
    inv: &'a Inventory,
    memory: bool,
    next_id: u64,
    label: Label,
    /// Per device: what the next compute task must wait for.
    frontier: Vec<Vec<TaskId>>,
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
}

impl<'a> Lower<'a> {
    fn devices(&self) -> u32 {
        self.p * self.dp
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

    fn group(&self, replica: u32) -> Vec<DeviceId> {
        (0..self.p).map(|i| replica * self.p + i).collect()
    }

    /// One collective over each replica's p devices, on `stream`; returns each device's task.
    fn collective(
        &mut self,
        name: &'static str,
        op: CollectiveOp,
        bytes: u64,
        stream: Stream,
        deps: &[Vec<TaskId>],
    ) -> Vec<TaskId> {
        self.label.name = name;
        let mut out = vec![0; self.devices() as usize];
        for r in 0..self.dp {
            let id = self.fresh();
            let group = self.group(r);
            let op = match op {
                CollectiveOp::Broadcast { root } => CollectiveOp::Broadcast {
                    root: group[root as usize],
                },
                CollectiveOp::Reduce { root } => CollectiveOp::Reduce {
                    root: group[root as usize],
                },
                o => o,
            };
            for &dev in &group {
                out[dev as usize] = self.add(
                    dev,
                    stream,
                    Work::Collective {
                        op,
                        id,
                        group: group.clone(),
                        bytes,
                    },
                    deps[dev as usize].clone(),
                );
            }
        }
        out
    }

    fn stage(&mut self, stage: &Stage) {
        match stage {
            Stage::Compute(kernels) => {
                for dev in 0..self.devices() {
                    self.kernels(dev, kernels, &[]);
                }
            }
            Stage::Collective { name, op, bytes } => {
                if self.p > 1 {
                    let deps = self.frontier.clone();
                    let ids = self.collective(name, *op, *bytes, BLOCKING, &deps);
                    for (dev, id) in ids.into_iter().enumerate() {
                        self.frontier[dev] = vec![id];
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
        for dev in 0..self.devices() {
            self.phase_tasks[dev as usize] = [None; STREAMS];
            self.label.name = b.phase.name();
            self.mem(dev, true, bytes, b.phase.name());
        }
        for s in &b.stages {
            self.stage(s);
        }
        for dev in 0..self.devices() {
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

/// Lowers a plan into a task graph; `inv` supplies the alloc/free sizes.
pub fn lower(plan: &StepPlan, p: u32, inv: &Inventory, opts: LowerOptions) -> TaskGraph {
    let n = (p * opts.dp) as usize;
    let mut l = Lower {
        g: TaskGraph::with_capacity(p * opts.dp, graph_size(plan, p, opts).tasks as usize),
        p,
        dp: opts.dp,
        inv,
        memory: opts.memory,
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
        last_compute: vec![None; n],
        phase_tasks: vec![[None; STREAMS]; n],
        kernel_ids: HashMap::default(),
        kernel_at: HashMap::default(),
    };
    let per_layer = inv.activation_bytes_per_layer;
    let model_scope: u128 = inv
        .tensors
        .iter()
        .filter(|t| t.kind == crate::memory::Kind::Stored && !t.per_layer)
        .map(|t| t.bytes())
        .sum();
    for dev in 0..l.devices() {
        l.mem(
            dev,
            true,
            inv.static_bytes + inv.reserved_bytes,
            "static+reserved",
        );
        l.mem(dev, true, model_scope, "embedding+head-activations");
    }
    let mut grad_sync: Vec<Vec<TaskId>> = vec![Vec::new(); n];
    for mb in 0..plan.micro_batches {
        l.label.micro_batch = mb;
        l.label.pass = Pass::Fwd;
        l.label.layer = None;
        l.label.block = "embedding";
        for dev in 0..l.devices() {
            l.kernels(dev, &plan.embedding_fwd, &[]);
        }
        for layer in 0..plan.layers {
            l.label.layer = Some(layer);
            l.label.pass = Pass::Fwd;
            for dev in 0..l.devices() {
                l.label.name = "layer-activations";
                l.mem(dev, true, per_layer, "layer-activations");
            }
            if plan.zero3_gather_bytes > 0 {
                zero3_gather(&mut l, plan);
            }
            for b in &plan.layer_fwd {
                l.phase(b, Pass::Fwd, Some(layer));
            }
        }
        l.phase(&plan.head, Pass::Fwd, None);
        for layer in (0..plan.layers).rev() {
            l.label.layer = Some(layer);
            l.label.pass = Pass::Bwd;
            if plan.zero3_gather_bytes > 0 {
                zero3_gather(&mut l, plan);
            }
            for b in &plan.layer_bwd {
                l.phase(b, Pass::Bwd, Some(layer));
            }
            for dev in 0..l.devices() {
                l.label.name = "layer-activations";
                l.mem(dev, false, per_layer, "layer-activations");
            }
            if mb + 1 == plan.micro_batches && plan.layer_grad_sync_bytes > 0 {
                let ids = grad_sync_collective(&mut l, plan);
                for (d, id) in ids {
                    grad_sync[d as usize].push(id);
                }
            }
        }
        l.label.layer = None;
        l.label.block = "embedding";
        l.label.pass = Pass::Bwd;
        for dev in 0..l.devices() {
            l.kernels(dev, &plan.embedding_bwd, &[]);
        }
    }
    l.label.pass = Pass::Opt;
    l.label.block = "optimizer";
    for dev in 0..l.devices() {
        let extra = std::mem::take(&mut grad_sync[dev as usize]);
        if opts.optimizer {
            l.kernels(dev, &plan.optimizer, &extra);
        } else {
            l.frontier[dev as usize].extend(extra);
        }
        l.mem(dev, false, model_scope, "embedding+head-activations");
        l.mem(
            dev,
            false,
            inv.static_bytes + inv.reserved_bytes,
            "static+reserved",
        );
    }
    // The estimate the simulator's guard checks before building must bound what was built.
    debug_assert!(
        l.g.tasks.len() as u64 <= graph_size(plan, p, opts).tasks,
        "graph_size underestimates: {} tasks built",
        l.g.tasks.len()
    );
    l.g
}
