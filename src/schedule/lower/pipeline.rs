//! One pipeline stage's step: its 1F1B order of forwards and backwards, the activations and
//! gradients it exchanges with its neighbours, the gradient synchronisation after each
//! chunk's last micro-batch (after every micro-batch under ZeRO ≥ 2,
//! `StepPlan::grad_sync_every_micro_batch`; after the stage's whole backward under
//! `GradSync::AfterBackward`), the embedding group's all-reduce and the optimizer (`lower`'s
//! module docs). Blocking exchanges (`PipeP2p::Blocking`) hold the next compute until the send
//! has completed; lock-step ones (`PipeP2p::Lockstep`, DeepSpeed's) also post each receive only
//! once the receiving stage's previous compute has ended — not after its own pending send, as
//! DeepSpeed pairs a step's receive and send with the neighbour's in an order that cannot
//! deadlock — so a message moves only when both stages have reached it.

use super::sync::{gather_ahead, gather_first, gathered_ahead, grad_sync_collective, param_gather};
use super::*;
use crate::config::{GradSync, PipeOp, PipeP2p};
use crate::memory::{Block, GradLifetime, Kind};

/// Tags of pipeline messages: the top bit set, then the direction, the micro-batch and the
/// sending virtual stage (ring tags stay far below).
fn pipe_tag(backward: bool, micro_batch: u32, virtual_stage: u64) -> u64 {
    debug_assert!(virtual_stage < 1 << 30);
    1 << 63 | u64::from(backward) << 62 | u64::from(micro_batch) << 30 | virtual_stage
}

impl Lower<'_> {
    /// The per-micro-batch stored bytes of the embedding's and the head's inputs (the
    /// inventory counts them once per micro-batch in flight).
    fn edge_bytes(&self, block: Block) -> u128 {
        self.inv
            .tensors
            .iter()
            .filter(|t| t.kind == Kind::Stored && !t.per_layer && t.block == block)
            .fold(0u128, |acc, t| acc.saturating_add(t.bytes_each))
    }

    /// Lowers stage `stage` for the active devices: its 1F1B order, or `ops`.
    pub(super) fn stage_step(
        &mut self,
        plan: &StepPlan,
        stage: u32,
        ops: Option<&[PipeOp]>,
        optimizer: bool,
    ) {
        let w = self.w;
        let pp = w.outer.pp as u32;
        let chunks = w.stage_chunks(stage);
        let last_chunk = chunks.len() as u32 - 1;
        let inv = self.inv;
        let per_layer = inv.activation_bytes_per_layer;
        let (emb_bytes, head_bytes) = (
            self.edge_bytes(Block::Embedding),
            self.edge_bytes(Block::Head),
        );
        self.label.pass = Pass::Fwd;
        self.label.layer = None;
        self.label.block = "step";
        self.label.micro_batch = 0;
        // Lazily allocated gradients (`config::GradBuffer::Lazy`) are held per chunk from its
        // first backward, not from the step's start: whole ones to its last backward, shards to
        // the step's end (`memory::GradLifetime`).
        let held_grads = inv.held_grads.filter(|_| ops.is_none());
        let to_last_backward =
            held_grads.is_some_and(|g| g.lifetime == GradLifetime::ToLastBackward);
        let mut held_to_step_end = 0u128;
        let fixed_bytes =
            inv.static_bytes - held_grads.map_or(0, |_| inv.held_grad_bytes) + inv.reserved_bytes;
        for i in 0..self.active.len() {
            let dev = self.active[i];
            self.label.name = "static+reserved";
            self.mem(dev, true, fixed_bytes, "static+reserved");
        }
        let mut grad_sync: Vec<Vec<TaskId>> = vec![Vec::new(); self.sim_devices()];
        let m = w.micro_batches as u32;
        let mut marks = self.marks.as_ref().map(|_| StageMarks::default());
        // Ops lowered alone (a composed program) rather than the stage's whole order.
        let alone = ops.is_some();
        let order = match ops {
            Some(ops) => ops.to_vec(),
            None => w.pipeline_order(stage),
        };
        // With the updated weights gathered in the first forward (`config::ParamGather`), the
        // gathers run in one chain over the stage's chunks, as Megatron's distributed
        // optimizer orders its buckets (chunk by chunk, each in forward order) and issues the
        // next bucket's when the forward pre-hook waits for the current one: the first chunk's
        // first layer is gathered from the step's start (its first bucket is issued in the
        // optimizer's `zero_grad`, before the forward), every later layer one layer ahead — a chunk's
        // first layer as the chunk before it starts its last layer's first forward. An op
        // lowered alone (a composed program) finds its first layer gathered: the chain issued
        // it during the ops before, or, for the stage's first chunk, from the step's start —
        // the composition's walk waits for that one (`sim::compose`).
        let param_chain = gathered_ahead(plan, true, 0).filter(|_| plan.zero3_gather_bytes == 0);
        let gathering: Vec<u32> = (0..chunks.len() as u32)
            .filter(|&c| chunks[c as usize].1 > 0)
            .collect();
        let first_forward_of =
            |c: u32| move |op: &PipeOp| op.forward && op.micro_batch == 0 && op.chunk == c;
        // For each chunk, the chunk after it in the chain when its first forward is in this
        // order.
        let chained_after: Vec<Option<u32>> = (0..chunks.len() as u32)
            .map(|c| {
                gathering
                    .iter()
                    .copied()
                    .find(|&k| k > c)
                    .filter(|&k| order.iter().any(first_forward_of(k)))
            })
            .collect();
        // The chain's gather issued ahead of a chunk's first forward: (chunk, its gathers).
        let mut issued: Option<(u32, Vec<(DeviceId, TaskId)>)> = None;
        if let (Some(what), Some(&c)) = (param_chain, gathering.first()) {
            if !alone && order.iter().any(first_forward_of(c)) {
                self.label.layer = Some(chunks[c as usize].0 as u32);
                issued = gather_first(self, plan, what).map(|g| (c, g));
                self.label.layer = None;
            }
        }
        for op in order {
            if let Some(mk) = &mut marks {
                mk.ops.push(OpMarks {
                    start: self.next_task(),
                    ..OpMarks::default()
                });
            }
            let PipeOp {
                forward,
                micro_batch: mb,
                chunk,
            } = op;
            let u = chunk as u64 * pp as u64 + stage as u64;
            let first = w.has_embedding(stage) && chunk == 0;
            let last = w.has_head(stage) && chunk == last_chunk;
            let (first_layer, n_layers) = chunks[chunk as usize];
            self.label.micro_batch = mb;
            if forward {
                self.label.pass = Pass::Fwd;
                self.label.layer = None;
                if !first && self.messages {
                    self.pipe_recv(false, mb, u - 1, plan);
                }
                self.label.block = "embedding";
                if first {
                    self.each_mem(true, emb_bytes, "embedding-activations");
                    for i in 0..self.active.len() {
                        self.kernels(self.active[i], &plan.embedding_fwd, &[]);
                    }
                }
                if last {
                    self.label.block = "head";
                    self.each_mem(true, head_bytes, "head-activations");
                }
                let ahead = gathered_ahead(plan, true, mb).filter(|_| n_layers > 0);
                let chained = ahead.is_some() && param_chain.is_some() && mb == 0;
                let mut pending = match ahead {
                    Some(_) if chained && issued.as_ref().is_some_and(|i| i.0 == chunk) => {
                        issued.take().map(|(_, g)| g)
                    }
                    // Issued by the chain during the ops before this one (none here to wait).
                    Some(_) if chained && (alone || gathering.first() != Some(&chunk)) => {
                        Some(Vec::new())
                    }
                    Some(what) => {
                        self.label.layer = Some(first_layer as u32);
                        gather_first(self, plan, what)
                    }
                    None => None,
                };
                let chain_to = if chained {
                    chained_after[chunk as usize]
                } else {
                    None
                };
                for layer in first_layer..first_layer + n_layers {
                    self.mark_layer(&mut marks);
                    self.label.layer = Some(layer as u32);
                    self.label.pass = Pass::Fwd;
                    self.each_mem(true, per_layer, "layer-activations");
                    if let Some(what) = ahead {
                        let next = if layer + 1 < first_layer + n_layers {
                            Some(layer as u32 + 1)
                        } else {
                            chain_to.map(|k| chunks[k as usize].0 as u32)
                        };
                        gather_ahead(self, plan, what, &mut pending, next);
                    }
                    for b in &plan.layer_fwd {
                        self.phase(b, Pass::Fwd, Some(layer as u32));
                    }
                }
                if let (Some(k), Some(g)) = (chain_to, pending.take()) {
                    issued = Some((k, g));
                }
                self.mark_layers_end(&mut marks);
                self.label.layer = None;
                if last {
                    self.phase(&plan.head, Pass::Fwd, None);
                } else if self.messages {
                    self.pipe_send(false, mb, u, plan.pipeline_bytes);
                }
            } else {
                self.label.pass = Pass::Bwd;
                self.label.layer = None;
                if !last && self.messages {
                    self.pipe_recv(true, mb, u + 1, plan);
                }
                let chunk_grads = held_grads.map_or(0, |g| g.bytes(n_layers, first, last));
                if mb == 0 {
                    self.label.block = "step";
                    self.each_mem(true, chunk_grads, "held-gradients");
                    if !to_last_backward {
                        held_to_step_end += chunk_grads;
                    }
                }
                let ahead = gathered_ahead(plan, false, mb).filter(|_| n_layers > 0);
                let mut pending = match ahead {
                    Some(what) => {
                        self.label.layer = Some((first_layer + n_layers - 1) as u32);
                        self.label.pass = Pass::Bwd;
                        gather_first(self, plan, what)
                    }
                    None => None,
                };
                for layer in (first_layer..first_layer + n_layers).rev() {
                    self.mark_layer(&mut marks);
                    self.label.layer = Some(layer as u32);
                    self.label.pass = Pass::Bwd;
                    if let Some(what) = ahead {
                        let next = (layer > first_layer).then(|| layer as u32 - 1);
                        gather_ahead(self, plan, what, &mut pending, next);
                    }
                    for b in &plan.layer_bwd {
                        self.phase(b, Pass::Bwd, Some(layer as u32));
                    }
                    self.each_mem(false, per_layer, "layer-activations");
                    let sync_now = (mb + 1 == m || plan.grad_sync_every_micro_batch)
                        && w.options.runtime.grad_sync == GradSync::Overlapped;
                    if sync_now && plan.layer_grad_sync_bytes > 0 {
                        for (d, id) in grad_sync_collective(self, plan) {
                            grad_sync[d as usize].push(id);
                        }
                    }
                }
                self.mark_layers_end(&mut marks);
                self.label.layer = None;
                if last {
                    self.label.block = "head";
                    self.each_mem(false, head_bytes, "head-activations");
                }
                if first {
                    self.label.block = "embedding";
                    for i in 0..self.active.len() {
                        self.kernels(self.active[i], &plan.embedding_bwd, &[]);
                    }
                    self.each_mem(false, emb_bytes, "embedding-activations");
                } else if self.messages {
                    self.pipe_send(true, mb, u, plan.pipeline_bytes);
                }
                if mb + 1 == m && to_last_backward {
                    self.label.block = "step";
                    self.each_mem(false, chunk_grads, "held-gradients");
                }
            }
        }
        if let (Some(mut mk), Some(all)) = (marks, self.marks.as_mut()) {
            mk.end = self.g.tasks.len() as TaskId;
            all.push(mk);
        }
        self.label.layer = None;
        self.label.micro_batch = 0;
        if w.options.runtime.grad_sync == GradSync::AfterBackward && plan.layer_grad_sync_bytes > 0
        {
            // `config::runtime`: the stage's layers synchronised once its backward has ended.
            self.label.pass = Pass::Bwd;
            self.label.block = "step";
            for _ in 0..w.stage_layers(stage) {
                for (d, id) in grad_sync_collective(self, plan) {
                    grad_sync[d as usize].push(id);
                }
            }
        }
        if self.messages
            && plan.embedding_sync_bytes > 0
            && (w.has_embedding(stage) || w.has_head(stage))
        {
            for (d, id) in self.embedding_sync(plan.embedding_sync_bytes) {
                grad_sync[d as usize].push(id);
            }
        }
        self.label.pass = Pass::Opt;
        self.label.block = "optimizer";
        for i in 0..self.active.len() {
            let dev = self.active[i];
            let extra = std::mem::take(&mut grad_sync[dev as usize]);
            if optimizer {
                let kernels = plan
                    .optimizer
                    .get(stage as usize)
                    .or(plan.optimizer.last())
                    .map_or(&[][..], Vec::as_slice);
                self.kernels(dev, kernels, &extra);
            } else {
                self.frontier[dev as usize].extend(extra);
            }
        }
        if optimizer {
            param_gather(self, plan, stage);
        }
        self.label.block = "step";
        self.each_mem(false, held_to_step_end, "held-gradients");
        for i in 0..self.active.len() {
            let dev = self.active[i];
            self.label.name = "static+reserved";
            self.mem(dev, false, fixed_bytes, "static+reserved");
        }
    }

    /// The id the next task added will have.
    fn next_task(&self) -> TaskId {
        self.g.tasks.len() as TaskId
    }

    /// Records that a layer's tasks start here (when rounds are declared).
    fn mark_layer(&self, marks: &mut Option<StageMarks>) {
        let next = self.next_task();
        if let Some(op) = marks.as_mut().and_then(|m| m.ops.last_mut()) {
            op.layers.push(next);
        }
    }

    /// Records that the op's layers end here.
    fn mark_layers_end(&self, marks: &mut Option<StageMarks>) {
        let next = self.next_task();
        if let Some(op) = marks.as_mut().and_then(|m| m.ops.last_mut()) {
            op.layers_end = next;
        }
    }

    /// An alloc or free of `bytes` on every active device.
    fn each_mem(&mut self, alloc: bool, bytes: u128, tensor: &'static str) {
        self.label.name = tensor;
        for i in 0..self.active.len() {
            self.mem(self.active[i], alloc, bytes, tensor);
        }
    }

    /// The cluster rank of the peer of device `dev` at virtual stage `virtual_stage`.
    fn pipe_peer(&self, dev: DeviceId, virtual_stage: u64) -> DeviceId {
        let pp = self.w.outer.pp;
        let c = self.coords[dev as usize];
        self.rank_at(Coord {
            stage: (virtual_stage % pp) as u32,
            ..c
        })
    }

    /// Posts the receive of the activation (or, `backward`, the gradient) that virtual stage
    /// `from` sends for micro-batch `mb`; the next compute waits for it, and for the method
    /// group's all-gather of the received pieces where the plan has one
    /// (`StepPlan::pipeline_gather_bytes`), which starts once the receive and the stage's
    /// previous work have ended, as the host issues it.
    fn pipe_recv(&mut self, backward: bool, mb: u32, from: u64, plan: &StepPlan) {
        let bytes = plan.pipeline_bytes;
        let (stream, name, gather) = if backward {
            (PP_RECV_BWD, "pipeline-grad-recv", "pipeline-grad-gather")
        } else {
            (PP_RECV_FWD, "pipeline-act-recv", "pipeline-act-gather")
        };
        self.label.name = name;
        for i in 0..self.active.len() {
            let dev = self.active[i];
            let peer = self.pipe_peer(dev, from);
            // Lock-step: posted when this stage's previous compute has ended (its frontier
            // without the send still pending); otherwise posted at once.
            let deps = if self.w.options.runtime.pp_p2p == PipeP2p::Lockstep {
                let pending = std::mem::take(&mut self.pending_sends[dev as usize]);
                self.frontier[dev as usize]
                    .iter()
                    .copied()
                    .filter(|t| !pending.contains(t))
                    .collect()
            } else {
                Vec::new()
            };
            let id = self.g.add(
                dev,
                stream,
                Work::Recv {
                    from: peer,
                    bytes,
                    tag: pipe_tag(backward, mb, from),
                },
                deps,
                self.label,
            );
            self.frontier[dev as usize].push(id);
        }
        if plan.pipeline_gather_bytes > 0 && self.axes.p > 1 {
            let ids = self.collective_with(
                gather,
                CollectiveOp::AllGather,
                plan.pipeline_gather_bytes,
                BLOCKING,
                |l, dev| l.frontier[dev].clone(),
            );
            for i in 0..self.active.len() {
                let dev = self.active[i] as usize;
                let f = &mut self.frontier[dev];
                f.clear();
                f.push(ids[dev]);
            }
        }
    }

    /// Sends this virtual stage's (`from`) output forward, or its input gradient backward,
    /// once the compute before it has finished.
    fn pipe_send(&mut self, backward: bool, mb: u32, from: u64, bytes: u64) {
        let (stream, name, to) = if backward {
            (PP_SEND_BWD, "pipeline-grad-send", from - 1)
        } else {
            (PP_SEND_FWD, "pipeline-act-send", from + 1)
        };
        self.label.name = name;
        for i in 0..self.active.len() {
            let dev = self.active[i];
            let peer = self.pipe_peer(dev, to);
            let deps = self.frontier[dev as usize].clone();
            let id = self.g.add(
                dev,
                stream,
                Work::Send {
                    to: peer,
                    bytes,
                    tag: pipe_tag(backward, mb, from),
                },
                deps,
                self.label,
            );
            // Blocking exchanges (`config::runtime`): the next compute waits for the send.
            let p2p = self.w.options.runtime.pp_p2p;
            if p2p.blocks() {
                self.frontier[dev as usize].push(id);
            }
            if p2p == PipeP2p::Lockstep {
                self.pending_sends[dev as usize] = vec![id];
            }
        }
    }

    /// The all-reduce of tied embedding gradients between each first-stage device and its
    /// last-stage peer, on the asynchronous stream.
    fn embedding_sync(&mut self, bytes: u64) -> Vec<(DeviceId, TaskId)> {
        let last = self.w.outer.pp as u32 - 1;
        self.label.name = "embedding-grad-all-reduce";
        self.label.block = "embedding";
        let mut out = Vec::new();
        let mut done: Vec<Vec<DeviceId>> = Vec::new();
        for i in 0..self.active.len() {
            let dev = self.active[i];
            let c = self.coords[dev as usize];
            let group = vec![
                self.rank_at(Coord { stage: 0, ..c }),
                self.rank_at(Coord { stage: last, ..c }),
            ];
            if done.contains(&group) {
                continue;
            }
            let id = self.collective_id(&group);
            for m in self.members(&group) {
                if self.coords[m as usize].stage != c.stage {
                    continue;
                }
                let deps = self.frontier[m as usize].clone();
                let t = self.g.add(
                    m,
                    ASYNC,
                    Work::Collective {
                        op: CollectiveOp::AllReduce,
                        id,
                        group: group.clone(),
                        bytes,
                    },
                    deps,
                    self.label,
                );
                out.push((m, t));
            }
            done.push(group);
        }
        out
    }

    /// A collective id both stages of a cross-stage group agree on without coordinating: the
    /// top two bits set, then the group's first rank.
    fn collective_id(&self, group: &[DeviceId]) -> u64 {
        3 << 62 | u64::from(group[0])
    }
}
