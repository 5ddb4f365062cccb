//! The task graph of one training step: what every device does, on which stream, after what.
//!
//! Semantics the simulator (and anything else that runs a graph) must follow:
//! - Each device has streams (one compute stream, numbered communication streams). Tasks on one
//!   stream run in the order they were added (like CUDA streams); a task starts when it is at
//!   the head of its stream and all its `deps` have finished.
//! - `Send`/`Recv` pairs match on (from, to, tag). The transfer begins when both sides have
//!   started (rendezvous, as NCCL send/recv does) and both finish when the bytes have arrived.
//! - A `Collective` task is one rank's part; all tasks with the same `id` form the collective,
//!   which begins when every rank's task has started and finishes for all at once.
//! - `Alloc`/`Free` take no time and change the device's live bytes; the simulator's memory
//!   high-water mark comes from them, and they are drawn from the memory inventory.
//!
//! - **Placement.** A graph may simulate only the distinct programs of a larger cluster
//!   ([`Placement`]): its `devices` are the simulated devices, while `Send::to`,
//!   `Recv::from`, collective groups and broadcast roots name *cluster ranks*. Each cluster
//!   rank runs the program of one simulated device (its representative); a send or receive
//!   pairs on (representative of the sender, representative of the receiver, tag), and a
//!   collective has one task per distinct representative of its group that sits at its own
//!   rank (the canonical members). Without a placement cluster ranks are device ids.
//!
//! Tasks may only depend on tasks added before them, so the graph is acyclic by construction;
//! it can still deadlock (a recv whose send waits behind it on a stream), which the simulator
//! detects. Depends on nothing but the kernel shapes.

use serde::Serialize;

use super::shape::KernelShape;

/// Index of a task in [`TaskGraph::tasks`].
pub type TaskId = u32;
/// Index of a device, 0..devices.
pub type DeviceId = u32;

/// A device stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Stream {
    /// The compute stream.
    Compute,
    /// Communication stream `n`.
    Comm(u8),
}

/// Index of a kernel shape in [`TaskGraph::kernels`].
pub type KernelId = u32;

/// Collective operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CollectiveOp {
    /// All-reduce.
    AllReduce,
    /// All-gather.
    AllGather,
    /// Reduce-scatter.
    ReduceScatter,
    /// All-to-all.
    AllToAll,
    /// Broadcast from `root`.
    Broadcast {
        /// Root device.
        root: DeviceId,
    },
    /// Reduce to `root`.
    Reduce {
        /// Root device.
        root: DeviceId,
    },
}

/// What a task does.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Work {
    /// A kernel: the shape of the call, [`TaskGraph::kernels`]`[kernel]`.
    Compute {
        /// Index into the graph's kernel table.
        kernel: KernelId,
    },
    /// Send `bytes` to device `to`.
    Send {
        /// Destination.
        to: DeviceId,
        /// Message size.
        bytes: u64,
        /// Matches the receiver's `Recv`.
        tag: u64,
    },
    /// Receive `bytes` from device `from`.
    Recv {
        /// Source.
        from: DeviceId,
        /// Message size.
        bytes: u64,
        /// Matches the sender's `Send`.
        tag: u64,
    },
    /// One rank's part of a collective.
    Collective {
        /// Operation.
        op: CollectiveOp,
        /// Identifies the collective; equal on every participant.
        id: u64,
        /// Participating devices, in ring order.
        group: Vec<DeviceId>,
        /// Buffer size in bytes as nccl-tests defines it for the op (the full tensor for
        /// all-reduce / all-gather output / reduce-scatter input / all-to-all local buffer /
        /// broadcast).
        bytes: u64,
    },
    /// Allocate `bytes` (zero time).
    Alloc {
        /// Size.
        bytes: u128,
        /// Tensor name from the inventory.
        tensor: &'static str,
    },
    /// Free `bytes` (zero time).
    Free {
        /// Size.
        bytes: u128,
        /// Tensor name from the inventory.
        tensor: &'static str,
    },
}

/// Forward, backward or optimizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pass {
    /// Forward.
    Fwd,
    /// Backward.
    Bwd,
    /// Optimizer step.
    Opt,
}

/// Where a task belongs, for traces and breakdowns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Label {
    /// Pass.
    pub pass: Pass,
    /// Layer index, if the task belongs to a layer.
    pub layer: Option<u32>,
    /// Block: "attention", "mlp", "norm", "embedding", "head", "optimizer".
    pub block: &'static str,
    /// Short task name, e.g. "qkv", "attn-block", "kv-send".
    pub name: &'static str,
    /// Outer step (METP head group) if any.
    pub outer: Option<u32>,
    /// Ring step if any.
    pub step: Option<u32>,
    /// Micro-batch.
    pub micro_batch: u32,
}

/// One task.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Task {
    /// Device it runs on.
    pub device: DeviceId,
    /// Stream it runs on.
    pub stream: Stream,
    /// What it does.
    pub work: Work,
    /// Tasks that must finish first (all with smaller ids).
    pub deps: Vec<TaskId>,
    /// Where it belongs.
    pub label: Label,
}

/// Which cluster rank each simulated device stands for (graph module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Placement {
    /// Cluster rank of each simulated device.
    pub ranks: Vec<DeviceId>,
    /// For each cluster rank, the simulated device whose program it runs.
    pub representative: Vec<DeviceId>,
}

impl Placement {
    /// Cluster ranks.
    pub fn cluster_devices(&self) -> u32 {
        self.representative.len() as u32
    }

    /// Whether cluster rank `rank` is the position of its representative (its flows are
    /// simulated; the others' are mirror images of them).
    pub fn is_canonical(&self, rank: DeviceId) -> bool {
        self.representative
            .get(rank as usize)
            .is_some_and(|&d| self.ranks.get(d as usize) == Some(&rank))
    }
}

/// A run of rounds that repeat: in each [`Segment`], round k + 1 is round k with every task id
/// shifted by the segment's stride (the same devices, streams and work; dependencies, message
/// peers and collective members shifted the same way, or left alone when they lie outside the
/// segments). The lowering declares them (layers of a step without a pipeline, the steady
/// rounds of a pipeline: one segment per stage), the simulator checks the claim task by task
/// and uses it to prove that the step is periodic there (`sim::engine`'s recurrence monitor).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Periodic {
    /// One segment per group of devices that repeats (a stage); the first is the reference:
    /// round k starts when its first task does.
    pub segments: Vec<Segment>,
    /// Rounds the step to be reported has beyond those in this graph (0: none). When the
    /// simulator proves the rounds periodic, it reports the step with that many more periods
    /// inserted — the graph is a shortened copy of the step.
    pub insert: u64,
}

/// Consecutive rounds of equal size: tasks `base + k·stride .. base + (k+1)·stride` form round k.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Segment {
    /// First task of round 0.
    pub base: TaskId,
    /// Tasks per round.
    pub stride: u32,
    /// Rounds.
    pub rounds: u32,
}

impl Segment {
    /// The round task `t` belongs to, if it lies in the segment.
    pub fn round_of(&self, t: TaskId) -> Option<u32> {
        let off = t.checked_sub(self.base)?;
        let r = off / self.stride.max(1);
        (r < self.rounds).then_some(r)
    }

    /// One past the last task of the segment.
    pub fn end(&self) -> TaskId {
        self.base + self.stride * self.rounds
    }
}

/// A training step on `devices` devices.
///
/// The distinct kernel shapes are kept once in `kernels` (a step has hundreds of thousands of
/// compute tasks but tens of distinct shapes), and compute tasks refer to them by index.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TaskGraph {
    /// Number of devices.
    pub devices: u32,
    /// Tasks in insertion order.
    pub tasks: Vec<Task>,
    /// The kernel shapes compute tasks run.
    pub kernels: Vec<KernelShape>,
    /// The cluster the devices stand for, when only distinct programs are simulated (`None`:
    /// every cluster rank is a device of the graph).
    pub placement: Option<Placement>,
    /// Runs of repeating rounds the lowering declared (empty unless asked for).
    pub periodic: Vec<Periodic>,
}

impl TaskGraph {
    /// An empty graph over `devices` devices.
    pub fn new(devices: u32) -> TaskGraph {
        TaskGraph {
            devices,
            tasks: Vec::new(),
            kernels: Vec::new(),
            placement: None,
            periodic: Vec::new(),
        }
    }

    /// An empty graph with room for `tasks` tasks.
    pub fn with_capacity(devices: u32, tasks: usize) -> TaskGraph {
        TaskGraph {
            devices,
            tasks: Vec::with_capacity(tasks),
            kernels: Vec::new(),
            placement: None,
            periodic: Vec::new(),
        }
    }

    /// Cluster ranks the graph stands for (its devices without a placement).
    pub fn cluster_devices(&self) -> u32 {
        self.placement
            .as_ref()
            .map_or(self.devices, Placement::cluster_devices)
    }

    /// The simulated device running cluster rank `rank`'s program (`None` if out of range).
    pub fn device_of(&self, rank: DeviceId) -> Option<DeviceId> {
        match &self.placement {
            None => (rank < self.devices).then_some(rank),
            Some(p) => p.representative.get(rank as usize).copied(),
        }
    }

    /// The cluster rank of simulated device `device`.
    pub fn rank_of(&self, device: DeviceId) -> DeviceId {
        match &self.placement {
            None => device,
            Some(p) => p.ranks.get(device as usize).copied().unwrap_or(device),
        }
    }

    /// Whether cluster rank `rank` runs as itself (not as a mirror of another rank).
    pub fn is_canonical(&self, rank: DeviceId) -> bool {
        match &self.placement {
            None => rank < self.devices,
            Some(p) => p.is_canonical(rank),
        }
    }

    /// The simulated devices that take part in a collective over cluster ranks `group`: the
    /// representatives of its canonical members, in group order.
    pub fn collective_members(&self, group: &[DeviceId]) -> Vec<DeviceId> {
        group
            .iter()
            .filter(|&&r| self.is_canonical(r))
            .filter_map(|&r| self.device_of(r))
            .collect()
    }

    /// Appends a kernel shape to the table and returns its index (no deduplication: the
    /// lowering interns shapes itself).
    pub fn add_kernel(&mut self, shape: KernelShape) -> KernelId {
        self.kernels.push(shape);
        (self.kernels.len() - 1) as KernelId
    }

    /// Appends a task and returns its id. Dependencies must already exist (debug-asserted;
    /// [`TaskGraph::check`] reports violations as errors).
    pub fn add(
        &mut self,
        device: DeviceId,
        stream: Stream,
        work: Work,
        deps: Vec<TaskId>,
        label: Label,
    ) -> TaskId {
        let id = self.tasks.len() as TaskId;
        debug_assert!(deps.iter().all(|&d| d < id));
        self.tasks.push(Task {
            device,
            stream,
            work,
            deps,
            label,
        });
        id
    }

    /// Checks structural invariants: devices in range, dependencies point backwards, every
    /// `Send` has exactly one matching `Recv` of the same size and vice versa, every collective
    /// has one task per group member with equal op, group and size. Returns a one-line
    /// description of the first violation.
    pub fn check(&self) -> Result<(), String> {
        use std::collections::BTreeMap;
        let mut sends: BTreeMap<(DeviceId, DeviceId, u64), (TaskId, u64, usize)> = BTreeMap::new();
        let mut recvs: BTreeMap<(DeviceId, DeviceId, u64), (TaskId, u64, usize)> = BTreeMap::new();
        let mut colls: BTreeMap<u64, Vec<TaskId>> = BTreeMap::new();
        for (i, t) in self.tasks.iter().enumerate() {
            let i = i as TaskId;
            if t.device >= self.devices {
                return Err(format!(
                    "task {i} runs on device {} of {}",
                    t.device, self.devices
                ));
            }
            if let Some(&d) = t.deps.iter().find(|&&d| d >= i) {
                return Err(format!("task {i} depends on later task {d}"));
            }
            match &t.work {
                Work::Send { to, bytes, tag } => {
                    let Some(to) = self.device_of(*to) else {
                        return Err(format!("task {i} sends to rank {to}, outside the cluster"));
                    };
                    let e = sends.entry((t.device, to, *tag)).or_insert((i, *bytes, 0));
                    e.2 += 1;
                }
                Work::Recv { from, bytes, tag } => {
                    let Some(from) = self.device_of(*from) else {
                        return Err(format!(
                            "task {i} receives from rank {from}, outside the cluster"
                        ));
                    };
                    let e = recvs
                        .entry((from, t.device, *tag))
                        .or_insert((i, *bytes, 0));
                    e.2 += 1;
                }
                Work::Compute { kernel } if *kernel as usize >= self.kernels.len() => {
                    return Err(format!(
                        "task {i} runs kernel {kernel} of a table of {}",
                        self.kernels.len()
                    ));
                }
                Work::Collective { id, group, .. } => {
                    if !self.collective_members(group).contains(&t.device) {
                        return Err(format!(
                            "task {i}: device {} is not in its collective's group",
                            t.device
                        ));
                    }
                    colls.entry(*id).or_default().push(i);
                }
                _ => {}
            }
        }
        for (key, (task, bytes, n)) in &sends {
            if *n > 1 {
                return Err(format!("send {key:?} (task {task}) appears {n} times"));
            }
            match recvs.get(key) {
                None => {
                    return Err(format!(
                        "send task {task} ({} -> {}, tag {}) has no matching recv",
                        key.0, key.1, key.2
                    ))
                }
                Some((r, rb, _)) if rb != bytes => {
                    return Err(format!(
                        "send task {task} carries {bytes} bytes but recv task {r} expects {rb}"
                    ))
                }
                _ => {}
            }
        }
        for (key, (task, _, n)) in &recvs {
            if *n > 1 {
                return Err(format!("recv {key:?} (task {task}) appears {n} times"));
            }
            if !sends.contains_key(key) {
                return Err(format!(
                    "recv task {task} ({} -> {}, tag {}) has no matching send",
                    key.0, key.1, key.2
                ));
            }
        }
        for (id, members) in &colls {
            let first = &self.tasks[members[0] as usize];
            let Work::Collective {
                op, group, bytes, ..
            } = &first.work
            else {
                continue;
            };
            let expected = self.collective_members(group).len();
            if members.len() != expected {
                return Err(format!(
                    "collective {id} has {} participating tasks for a group of {expected}",
                    members.len(),
                ));
            }
            for &m in members {
                let t = &self.tasks[m as usize];
                if let Work::Collective {
                    op: o,
                    group: g,
                    bytes: b,
                    ..
                } = &t.work
                {
                    if o != op || g != group || b != bytes {
                        return Err(format!(
                            "collective {id}: task {m} disagrees with task {} on op, group or size",
                            members[0]
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}
