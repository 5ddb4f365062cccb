//! The closed form of a pipelined step: every stage's 1F1B order walked with the lowering's
//! dependencies, each forward and backward priced from the plan's layer, head and embedding
//! prices.
//!
//! - A forward of virtual stage u starts when its stage is free and the activation of u − 1 has
//!   arrived; a backward when the gradient of u + 1 has. A message leaves when its op has ended
//!   and the stage's previous message in that direction has arrived (one stream per
//!   direction), and takes `α + bytes/B` over the link class the two stages' devices share.
//! - Forward: the embedding on the first virtual stage, then its layers (ZeRO-3 gather and the
//!   layer's forward each), the head and loss on the last. Backward: the layers in reverse,
//!   then the embedding's backward on the first virtual stage.
//! - A chunk's last micro-batch (every micro-batch under ZeRO ≥ 2) synchronises each layer's
//!   gradients as its backward ends, one collective after the other on the asynchronous
//!   stream, slowing compute by σ while that traffic flows — backwards and, when it spills
//!   over, the forwards after them; tied embeddings are then all-reduced between the first
//!   and the last stage, and each stage runs its optimizer (and, with a sharded optimizer
//!   state below ZeRO-3, then all-gathers its updated weights). Without a pipeline a step
//!   whose every micro-batch synchronises is walked here too (one stage, forward then
//!   backward per micro-batch), so the queue carries over from one micro-batch to the next.
//! - `config::runtime`: with blocking exchanges a stage's compute waits until the message it
//!   sent has arrived (the receiver's readiness is not modelled: a message leaves when its
//!   sender is done); with the synchronisation after the backward, each stage's layers are
//!   synchronised one after the other once its last backward has ended.
//! - Exposed communication: the layers' own, the part of a wait for a neighbour's message
//!   during which that message is in flight (the rest of a wait is the bubble), and the
//!   synchronisation left after the last backward. The critical stage is the one that
//!   computes longest (as the simulator's critical device).

use super::gather_ahead::{self, GatherAhead};
use super::{PartTimes, Pricer};
use crate::config::{GradSync, PipeP2p, ValidWorkload};
use crate::schedule::{CollectiveOp, Mailboxes, StepPlan, StepTimes};
use std::collections::{HashMap, VecDeque};

/// The prices the unpipelined step is made of.
#[derive(Clone)]
pub(super) struct Parts {
    pub emb_f: f64,
    pub emb_b: f64,
    /// Per stage: ZeRO-3's gather of one layer's weights (over the stage's replica group that
    /// spans the most nodes: `config::groups`).
    pub gather: Vec<f64>,
    /// Per stage: one layer's gradient synchronisation.
    pub sync: Vec<f64>,
    /// Per stage: the all-gather of its updated weights after its optimizer step.
    pub param_gather: Vec<f64>,
    /// Per stage: one layer's all-gather of the updated weights in the first micro-batch's
    /// forward, one layer ahead (`config::ParamGather::Overlapped`; 0 otherwise).
    pub first_gather: Vec<f64>,
    pub fwd_layer: PartTimes,
    pub bwd_layer: PartTimes,
    pub head: PartTimes,
}

#[derive(Debug, Clone, Default)]
struct StageClock {
    /// When the compute stream is free.
    t: f64,
    /// When the last message sent forward / backward has arrived.
    sent: [f64; 2],
    compute: f64,
    busy: f64,
    comm: f64,
    exposed: f64,
    /// End of the gradient-synchronisation queue.
    queue_end: f64,
    /// The synchronisations in flight, for the slowdown of later layers.
    syncs: Syncs,
    /// Extra compute time from that slowdown.
    slowed: f64,
}

/// A stage's gradient synchronisations, queued one after the other: (start, end), starts and
/// ends non-decreasing.
#[derive(Debug, Clone, Default)]
struct Syncs(VecDeque<(f64, f64)>);

impl Syncs {
    /// How long the synchronisations overlap [t0, t1]. A stage asks with t0 never below an
    /// earlier question's (its clock only advances), so those that ended by t0 can add nothing
    /// again and are dropped: a step that synchronises every micro-batch would otherwise scan
    /// every earlier one at each op (quadratic in the micro-batches). Only zero terms leave the
    /// sum, so it is the same to the bit.
    fn hidden(&mut self, t0: f64, t1: f64) -> f64 {
        while self.0.front().is_some_and(|&(_, end)| end <= t0) {
            self.0.pop_front();
        }
        // Starts never decrease either: those from t1 on add nothing now.
        self.0
            .iter()
            .take_while(|&&(start, _)| start < t1)
            .map(|&(a, b)| (b.min(t1) - a.max(t0)).max(0.0))
            .sum()
    }
}

/// Ops past which a walk is not taken to the end: the steady rounds repeat, so the step is
/// priced from two walks of fewer micro-batches and extrapolated along them (the same numbers
/// to rounding: tests below; a step of 65,536 micro-batches over 64 stages would be 8 M ops
/// per configuration, and a plan prices tens of thousands).
pub(super) const MAX_WALK_OPS: u64 = 1 << 16;

/// Prices a pipelined plan (pp > 1).
pub(super) fn price(
    w: &ValidWorkload,
    plan: &StepPlan,
    pr: &Pricer,
    max_walk_ops: u64,
    parts: Parts,
) -> StepTimes {
    let (pp, v, m) = (w.outer.pp, w.outer.interleave, w.micro_batches);
    let ops = 2 * pp * v * m;
    // Micro-batches per steady round (Megatron's interleaving goes in groups of pp, LLaMA 3's
    // flexible schedule in its rounds: `config::runtime`).
    let period = if v > 1 {
        w.options.runtime.pp_round.unwrap_or(pp)
    } else {
        1
    };
    // Enough micro-batches for every stage's warm-up and cool-down and a few steady rounds.
    let m1 = (4 * pp * v).div_ceil(period) * period;
    if ops <= max_walk_ops || m <= m1 + period {
        return walk(w, plan, pr, &parts, m as u32);
    }
    let a = walk(w, plan, pr, &parts, m1 as u32);
    let b = walk(w, plan, pr, &parts, (m1 + period) as u32);
    let k = (m - m1) as f64 / period as f64;
    let f = |x: f64, y: f64| (x + k * (y - x)).max(0.0);
    StepTimes {
        step_time_s: f(a.step_time_s, b.step_time_s),
        compute_s: f(a.compute_s, b.compute_s),
        communication_s: f(a.communication_s, b.communication_s),
        exposed_communication_s: f(a.exposed_communication_s, b.exposed_communication_s),
    }
}

/// A lower bound on [`price`]'s step: per stage, its ops back to back — each forward and
/// backward of each chunk once per micro-batch, without waiting for messages, for gradient
/// synchronisations or slowed by them — then its optimizer and the all-gather of its updated
/// weights; the longest stage. (The walk's
/// stage clock only ever adds to these, and the step ends after every stage's optimizer.)
pub(super) fn lower_bound(w: &ValidWorkload, plan: &StepPlan, pr: &Pricer, parts: &Parts) -> f64 {
    let pp = w.outer.pp as u32;
    let last_u = w.outer.pp * w.outer.interleave - 1;
    let m = w.micro_batches as f64;
    let mut longest = 0.0f64;
    for s in 0..pp {
        let mut t = 0.0;
        let gather = parts.gather[s as usize];
        for (chunk, &(_, n)) in w.stage_chunks(s).iter().enumerate() {
            let u = chunk as u64 * w.outer.pp + u64::from(s);
            let mut fwd = parts.fwd_layer.wall + gather;
            fwd *= n as f64;
            if u == 0 {
                fwd += parts.emb_f + parts.emb_b;
            }
            if u == last_u {
                fwd += parts.head.wall;
            }
            let bwd = n as f64 * (gather + parts.bwd_layer.wall);
            t += m * (fwd + bwd);
        }
        let opt = pr.kernels(
            plan.optimizer
                .get(s as usize)
                .map_or(&[][..], Vec::as_slice),
        );
        let param_gather = parts.param_gather.get(s as usize).copied().unwrap_or(0.0);
        longest = longest.max(t + opt + param_gather);
    }
    // Floating sums in another order than the walk's: a hair below, so the bound stays one.
    longest * (1.0 - 1e-12)
}

/// A lock-step send waiting for its receiver (`PipeP2p::Lockstep`): the message's direction
/// and micro-batch, the receiving virtual stage, and when the sender's compute produced it.
#[derive(Debug, Clone, Copy)]
struct Pending {
    gradient: bool,
    micro_batch: u32,
    to: u64,
    ready: f64,
}

/// The walk of every stage's 1F1B order with `m` micro-batches per replica.
fn walk(w: &ValidWorkload, plan: &StepPlan, pr: &Pricer, parts: &Parts, m: u32) -> StepTimes {
    let pp = w.outer.pp as u32;
    let v = w.outer.interleave;
    let last_u = pp as u64 * v - 1;
    let cost = pr.cost;
    // α + bytes/B of a message from stage a to stage b: every device of stage a sends its piece
    // to the device at the same place in stage b, and the slowest piece decides (where nodes do
    // not divide the stages, some pieces cross the network while device 0's stays inside a
    // node). One pass over a stage's devices per pair of stages, remembered.
    let stage_devices = (w.p * w.outer.cp * w.dp) as u32;
    // Every piece crosses the same links where the stages are whole nodes (and whole leaves of
    // a spine) or each lies inside one node: the first piece stands for all.
    let sd = u64::from(stage_devices);
    let alike = sd.is_multiple_of(w.hardware.gpus_per_leaf())
        || w.hardware.gpus_per_node.max(1).is_multiple_of(sd);
    let pieces = if alike { 1 } else { stage_devices };
    let slowest = std::cell::RefCell::new(std::collections::HashMap::<(u32, u32), f64>::new());
    let msg = |a: u32, b: u32| {
        *slowest.borrow_mut().entry((a, b)).or_insert_with(|| {
            (0..pieces)
                .map(|o| {
                    cost.message_s(
                        a * stage_devices + o,
                        b * stage_devices + o,
                        plan.pipeline_bytes as f64,
                    )
                })
                .fold(0.0, f64::max)
        })
    };
    // The receiving method group's all-gather of the pieces after every receive, where the
    // plan has one (`StepPlan::pipeline_gather_bytes`): it starts once the message has arrived
    // and the stage is free, and the next compute waits for it.
    let pipe_gather = if plan.pipeline_gather_bytes > 0 && w.p > 1 {
        pr.collective(
            CollectiveOp::AllGather,
            &pr.group,
            plan.pipeline_gather_bytes,
        )
    } else {
        0.0
    };
    let v32 = v as u32;
    let len = 2 * m * v32;
    // Op by op, without listing the orders (a long walk keeps no list).
    let op_at = |s: u32, k: u32| w.pipeline_op(m, s, k);
    let chunks: Vec<_> = (0..pp).map(|s| w.stage_chunks(s)).collect();
    let Parts {
        emb_f,
        emb_b,
        gather: gathers,
        sync: syncs,
        param_gather,
        first_gather: first_gathers,
        fwd_layer,
        bwd_layer,
        head,
    } = parts.clone();
    let busy_ratio = if bwd_layer.wall > 0.0 {
        bwd_layer.busy / bwd_layer.wall
    } else {
        0.0
    };
    let sigma = pr.sigma;
    // `config::runtime`: exchanges that block the compute stream until they have arrived, and
    // a gradient synchronisation that starts only after the stage's whole backward.
    let blocking = w.options.runtime.pp_p2p.blocks();
    // Lock-step (DeepSpeed's): a message leaves only once its receiver has posted the receive,
    // when the receiver's previous compute has ended; until then the sender waits with it.
    let lockstep = w.options.runtime.pp_p2p == PipeP2p::Lockstep;
    let mut posted: HashMap<(bool, u32, u64), f64> = HashMap::new();
    let mut pending: Vec<Option<Pending>> = vec![None; pp as usize];
    let mut compute_end = vec![0.0f64; pp as usize];
    let mut posted_op = vec![usize::MAX; pp as usize];
    let after_backward = w.options.runtime.grad_sync == GradSync::AfterBackward;
    // Arrivals of messages: (backward, micro-batch, receiving virtual stage) → (leaves, arrives).
    let mut arrivals = Mailboxes::new(pp as u64 * v);
    let mut clocks = vec![StageClock::default(); pp as usize];
    let mut idx = vec![0usize; pp as usize];
    let mut fwd_sums: [Vec<Option<(PartTimes, f64)>>; 8] = Default::default();
    // Per stage, when the chain's gather of the next chunk's first layer arrives.
    let mut chain_at: Vec<Option<f64>> = vec![None; pp as usize];
    loop {
        let mut progress = false;
        for s in 0..pp {
            let su = s as usize;
            let (gather, sync, first_gather) = (gathers[su], syncs[su], first_gathers[su]);
            loop {
                let more = (idx[su] as u32) < len;
                let next = more.then(|| op_at(s, idx[su] as u32));
                if lockstep {
                    // The next op's receive is posted as soon as the previous compute ended.
                    if let Some(op) = next {
                        let u = op.chunk as u64 * pp as u64 + s as u64;
                        let needs = if op.forward { u > 0 } else { u < last_u };
                        if needs && posted_op[su] != idx[su] {
                            posted.insert((!op.forward, op.micro_batch, u), compute_end[su]);
                            posted_op[su] = idx[su];
                        }
                    }
                    // The pending send leaves once its receiver has posted; the stage waits.
                    if let Some(ps) = pending[su] {
                        let Some(post) = posted.remove(&(ps.gradient, ps.micro_batch, ps.to))
                        else {
                            break;
                        };
                        let c = &mut clocks[su];
                        let dir = usize::from(ps.gradient);
                        let leaves = ps.ready.max(post).max(c.sent[dir]);
                        let arrives = leaves + msg(s, (ps.to % pp as u64) as u32);
                        c.sent[dir] = arrives;
                        c.comm += arrives - leaves;
                        arrivals.post(ps.gradient, ps.micro_batch, ps.to, leaves, arrives);
                        if arrives > c.t {
                            c.exposed += arrives - c.t.max(leaves);
                            c.t = arrives;
                        }
                        pending[su] = None;
                        progress = true;
                    }
                }
                let Some(op) = next else { break };
                let u = op.chunk as u64 * pp as u64 + s as u64;
                let Some(arrival) = arrivals.input(&op, u, last_u) else {
                    break;
                };
                let c = &mut clocks[su];
                let mut t = c.t;
                if let Some((leaves, arrives)) = arrival {
                    if arrives > t {
                        c.exposed += arrives - t.max(leaves);
                        t = arrives;
                    }
                    c.comm += arrives - leaves + pipe_gather;
                    c.exposed += pipe_gather;
                    t += pipe_gather;
                }
                let n = chunks[su][op.chunk as usize].1;
                if op.forward {
                    // A forward's parts depend on its layers, embedding and head only (and,
                    // for the first micro-batch, the updated weights it gathers ahead): summed
                    // once per kind (the same sum, in the same order, as op by op).
                    let gathers_first = op.micro_batch == 0 && first_gather > 0.0 && n > 0;
                    let ahead = if gathers_first { first_gather } else { gather };
                    let kind = usize::from(gathers_first) * 4
                        + usize::from(u == 0) * 2
                        + usize::from(u == last_u);
                    // `first_arrives`: when the run's first gather, issued before it, arrives
                    // (absolute); `chain`: its last layer issues the next chunk's first.
                    let sum = |first_arrives: Option<f64>, chain: bool| {
                        let mut d = PartTimes::default();
                        if u == 0 {
                            d += PartTimes::computing(emb_f);
                        }
                        let run_start = t + d.wall;
                        let (beside, chained) = match first_arrives {
                            Some(at) => {
                                let from = (ahead, at - run_start);
                                gather_ahead::add_chained_run(
                                    &mut d, n, from, fwd_layer, sigma, chain,
                                )
                            }
                            None => (
                                gather_ahead::add_run(&mut d, n, ahead, fwd_layer, sigma),
                                None,
                            ),
                        };
                        if u == last_u {
                            d += head;
                        }
                        (d, beside, chained.map(|rel| run_start + rel))
                    };
                    // The updated weights' gathers run in one chain over the stage's chunks
                    // (`schedule::lower::pipeline`): the first chunk's first layer gathered from
                    // the step's start, each later chunk's as the chunk before it starts its
                    // last layer's first forward. Those forwards depend on when they start, so
                    // each is priced on its own.
                    let d = if gathers_first {
                        let first_in_chain = chunks[su]
                            .iter()
                            .position(|&(_, k)| k > 0)
                            .is_some_and(|c| c == op.chunk as usize);
                        let chain = chunks[su][op.chunk as usize + 1..]
                            .iter()
                            .any(|&(_, k)| k > 0);
                        let at = if first_in_chain {
                            Some(ahead)
                        } else {
                            chain_at[su].take()
                        };
                        let (d, beside, chained) = sum(at, chain);
                        chain_at[su] = chained;
                        (d, beside)
                    } else {
                        let slot = &mut fwd_sums[kind];
                        if slot.len() <= n as usize {
                            slot.resize(n as usize + 1, None);
                        }
                        *slot[n as usize].get_or_insert_with(|| {
                            let (d, beside, _) = sum(None, false);
                            (d, beside)
                        })
                    };
                    let (d, beside) = d;
                    // Gradient synchronisations still flowing (ZeRO ≥ 2 syncs every
                    // micro-batch) slow this forward's compute by σ while they overlap it.
                    // The gathers flowing beside it have slowed it already.
                    let hidden = c.syncs.hidden(t, t + d.wall).min(d.wall - beside);
                    let ratio = if d.wall > 0.0 { d.busy / d.wall } else { 0.0 };
                    let ext = sigma * hidden.clamp(0.0, d.wall) * ratio;
                    c.compute += d.compute;
                    c.busy += d.busy + ext;
                    c.comm += d.comm;
                    c.exposed += d.wall - d.busy;
                    c.slowed += ext;
                    t += d.wall + ext;
                } else {
                    let last_mb = (op.micro_batch + 1 == m || plan.grad_sync_every_micro_batch)
                        && sync > 0.0
                        && !after_backward;
                    let mut gathers = GatherAhead::start(gather, t);
                    for l in 0..n {
                        let (c0, next) = gathers.layer(t, l + 1 < n);
                        let c1 = c0 + bwd_layer.wall;
                        // What flows beside the compute: the synchronisations still queued and
                        // the next layer's gather, counted once where both do.
                        let mut hidden =
                            next.map_or(0.0, |(a, b)| gather_ahead::overlap(a, b, c0, c1));
                        if last_mb {
                            let syncs = c.syncs.hidden(c0, c1);
                            let both = next.map_or(0.0, |(_, b)| c.syncs.hidden(c0, b.min(c1)));
                            hidden += syncs - both;
                        }
                        let ext = sigma * hidden.clamp(0.0, bwd_layer.wall) * busy_ratio;
                        c.compute += bwd_layer.compute;
                        c.busy += bwd_layer.busy + ext;
                        c.comm += gather + bwd_layer.comm;
                        c.exposed += (c0 - t) + (bwd_layer.wall - bwd_layer.busy);
                        c.slowed += ext;
                        t = c1 + ext;
                        if last_mb {
                            let start = c.queue_end.max(t);
                            c.queue_end = start + sync;
                            c.syncs.0.push_back((start, c.queue_end));
                            c.comm += sync;
                        }
                    }
                    if u == 0 {
                        let hidden = c.syncs.hidden(t, t + emb_b);
                        let ext = sigma * hidden.min(emb_b);
                        c.compute += emb_b;
                        c.busy += emb_b + ext;
                        t += emb_b + ext;
                    }
                }
                c.t = t;
                compute_end[su] = t;
                // The output goes on (forward to u + 1, backward to u − 1).
                let to = if op.forward {
                    (u < last_u).then(|| u + 1)
                } else {
                    (u > 0).then(|| u - 1)
                };
                if let (Some(to), true) = (to, lockstep) {
                    // Lock-step: it leaves once the receiver has posted (top of the loop).
                    pending[su] = Some(Pending {
                        gradient: !op.forward,
                        micro_batch: op.micro_batch,
                        to,
                        ready: t,
                    });
                } else if let Some(to) = to {
                    let dir = usize::from(!op.forward);
                    let leaves = t.max(c.sent[dir]);
                    let to_stage = (to % pp as u64) as u32;
                    let arrives = leaves + msg(s, to_stage);
                    c.sent[dir] = arrives;
                    c.comm += arrives - leaves;
                    arrivals.post(!op.forward, op.micro_batch, to, leaves, arrives);
                    if blocking {
                        c.exposed += arrives - c.t;
                        c.t = arrives;
                    }
                }
                idx[su] += 1;
                progress = true;
            }
        }
        if !progress {
            break;
        }
    }
    // After the whole backward (`GradSync::AfterBackward`): each layer's synchronisation,
    // one after the other, nothing left to overlap them with.
    if after_backward && syncs.iter().any(|&x| x > 0.0) {
        for (s, c) in clocks.iter_mut().enumerate() {
            let n: u64 = chunks[s].iter().map(|ch| ch.1).sum();
            c.queue_end = c.t + n as f64 * syncs[s];
            c.comm += n as f64 * syncs[s];
        }
    }
    // The synchronisation left after the last backward, the embedding group, the optimizer.
    let mut ends: Vec<f64> = clocks.iter().map(|c| c.t.max(c.queue_end)).collect();
    for c in clocks.iter_mut() {
        c.exposed += (c.queue_end - c.t).max(0.0);
    }
    if plan.embedding_sync_bytes > 0 {
        let (a, b) = (0usize, pp as usize - 1);
        // The pair of devices at the same place in the first and the last stage whose link is
        // the slowest (the embedding group of device 0 where nodes divide the stages).
        let last = (pp - 1) * stage_devices;
        let o = (0..pieces)
            .map(|o| (cost.message_s(o, last + o, 1.0), o))
            .fold((0.0, 0), |best, x| if x.0 > best.0 { x } else { best })
            .1;
        let pair = [o, last + o];
        let d = pr.collective(CollectiveOp::AllReduce, &pair, plan.embedding_sync_bytes);
        let start = ends[a].max(ends[b]);
        // The collective starts when both stages have reached it; waiting for the other is
        // idle time, not communication.
        for s in [a, b] {
            let c = &mut clocks[s];
            c.comm += d;
            c.exposed += d;
            ends[s] = start + d;
        }
    }
    let mut step = 0.0f64;
    for (s, c) in clocks.iter_mut().enumerate() {
        let opt = pr.kernels(plan.optimizer.get(s).map_or(&[][..], Vec::as_slice));
        let gather = param_gather.get(s).copied().unwrap_or(0.0);
        c.compute += opt;
        c.busy += opt;
        c.comm += gather;
        c.exposed += gather;
        step = step.max(ends[s] + opt + gather);
    }
    let critical = clocks
        .iter()
        .enumerate()
        .max_by(|(i, a), (j, b)| a.compute.total_cmp(&b.compute).then_with(|| j.cmp(i)))
        .map(|(_, c)| c.clone())
        .unwrap_or_default();
    StepTimes {
        step_time_s: step,
        compute_s: critical.compute,
        communication_s: critical.comm,
        exposed_communication_s: critical.exposed.max(0.0),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::testing::gpt3_tp_sp;
    use crate::config::Options;

    /// The bound the planner prunes with is one: never above the walk's step, and close to it
    /// where the pipeline is full (1F1B and interleaved, uneven layers, synchronisation).
    #[test]
    fn the_lower_bound_is_below_the_step() {
        for (layers, pp, v, m, dp) in [
            (32u64, 4u64, 1u64, 4u64, 1u64),
            (30, 4, 2, 8, 2),
            (24, 2, 3, 64, 4),
        ] {
            let w = gpt3_tp_sp(layers, (pp, v, dp), m, 2 * pp * dp, Options::default());
            let plan = crate::schedule::plan(&w);
            let step = super::super::price(&w, &plan).step_time_s;
            let lb = super::super::step_lower_bound(&w, &plan);
            assert!(
                lb <= step && lb > 0.5 * step,
                "{layers} {pp} {v} {m}: {lb} vs {step}"
            );
        }
    }

    /// Walks too long to take to the end are two shorter walks extrapolated along the steady
    /// rounds: the same step, to rounding, as the whole walk (1F1B and interleaved, with
    /// gradient synchronisation over replicas; the whole walk sums 10^5 ops, so rounding reaches
    /// ~10⁻¹² of the step).
    #[test]
    fn long_walks_extrapolate_to_the_whole_walk() {
        for (pp, v, m) in [(8u64, 1u64, 9000u64), (4, 2, 8192)] {
            let w = gpt3_tp_sp(8 * v * pp, (pp, v, 2), m, 2 * pp, Options::default());
            assert!(2 * pp * v * m > super::MAX_WALK_OPS);
            let plan = crate::schedule::plan(&w);
            let short = super::super::price(&w, &plan);
            let whole = super::super::price_walking(&w, &plan, u64::MAX);
            let rel = |a: f64, b: f64| (a - b).abs() / b;
            assert!(
                rel(short.step_time_s, whole.step_time_s) < 1e-10,
                "{short:?} {whole:?}"
            );
            assert!(rel(short.compute_s, whole.compute_s) < 1e-10);
            assert!(rel(short.communication_s, whole.communication_s) < 1e-10);
            assert!(
                (short.exposed_communication_s - whole.exposed_communication_s).abs()
                    < 1e-10 * whole.step_time_s
            );
        }
    }
}
