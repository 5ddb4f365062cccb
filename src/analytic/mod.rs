//! Closed-form step time: prices a method's [`StepPlan`] stage by stage, without the event
//! engine, so that the two can check each other (DESIGN §3: with ideal links they must agree
//! within 1%).
//!
//! Every devices of a group is assumed to follow the same timeline (the critical device's, for
//! causal rings whose per-device work differs). Per stage:
//! - compute: the sum of its kernels' times (the cost model's kernel model);
//! - a blocking collective: the closed form of the algorithm the profile picks for it
//!   (`cost::collective`: a ring is `steps × (α + chunk / B)`, B the narrowest link a transfer
//!   of the group crosses; direct and tree steps are priced at their busiest link);
//! - a ring with two receive buffers: the transfer for step k+1 starts with step k, so step k
//!   lasts `D(C_k, M)` — M when the transfer is longer, else `C_k + σ·M` because compute runs
//!   at (1 − σ) of its speed while a transfer is in flight (σ = the profile's overlap slowdown);
//!   with one buffer the transfer follows the compute: `C_k + M`. Traveling accumulators add a
//!   dependency on the previous hop and a final hop back to the owner;
//! - METP's outer loop: the first group's weights are exposed, later groups' fetches hide
//!   behind the previous group's body when two buffers allow it, and weight-gradient returns
//!   queue behind the bodies.
//!
//! Depends on `config`, `cost`, `schedule`'s plan types and `error`; never on `sim`.

mod overlap;
mod pipeline;

pub use overlap::{solve_thresholds, thresholds, SolvedThresholds, Thresholds};

use crate::config::{GradSync, ValidWorkload, Workload};
use crate::cost::CostModel;
use crate::schedule::KernelShape;

/// α and rate of a message between ring neighbours of a group.
#[derive(Debug, Clone, Copy)]
struct PathFigures {
    latency_s: f64,
    flow_bytes_per_s: f64,
}

fn path_of(cost: &CostModel, devices: &[u32]) -> PathFigures {
    let (latency_s, flow_bytes_per_s) = cost.group_p2p(devices);
    PathFigures {
        latency_s,
        flow_bytes_per_s,
    }
}
use crate::schedule::{
    Axis, CollectiveOp, Exchange, Kernel, Outer, PhaseBlock, Ring, Stage, StepPlan, StepTimes,
};

/// Accumulated times of a part of the step.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PartTimes {
    wall: f64,
    /// Kernel time at full speed.
    compute: f64,
    /// Wall time with compute running (kernels slowed by overlapped communication last longer).
    busy: f64,
    comm: f64,
}

impl PartTimes {
    /// `s` of kernels alone (nothing in flight).
    fn computing(s: f64) -> PartTimes {
        PartTimes {
            wall: s,
            compute: s,
            busy: s,
            comm: 0.0,
        }
    }

    /// `s` of communication the compute stream waits for (nothing to overlap it with).
    /// `k` of these in a row.
    fn times(self, k: f64) -> PartTimes {
        PartTimes {
            wall: self.wall * k,
            compute: self.compute * k,
            busy: self.busy * k,
            comm: self.comm * k,
        }
    }

    fn waiting_on_comm(s: f64) -> PartTimes {
        PartTimes {
            wall: s,
            compute: 0.0,
            busy: 0.0,
            comm: s,
        }
    }
}

impl std::ops::AddAssign for PartTimes {
    fn add_assign(&mut self, o: PartTimes) {
        self.wall += o.wall;
        self.compute += o.compute;
        self.busy += o.busy;
        self.comm += o.comm;
    }
}

pub(crate) struct Pricer<'a> {
    cost: CostModel<'a>,
    p: u64,
    /// The devices of the representative group, 0..p.
    group: Vec<u32>,
    /// The links a transfer between the group's members crosses, at their narrowest.
    path: PathFigures,
    /// Context-parallel ranks (device i of each group of p: 0, p, 2p, …), and the links their
    /// ring crosses at the narrowest.
    cp: u64,
    cp_path: PathFigures,
    sigma: f64,
    /// Collective times already priced: this configuration's (a step prices the same
    /// collective once per layer), then every configuration's on this profile
    /// (`cost::memo`: a plan's configurations share most of their collectives).
    collectives:
        std::cell::RefCell<std::collections::HashMap<crate::cost::collective::CollectiveKey, f64>>,
    memo: std::sync::Arc<crate::cost::memo::Memo>,
    /// Kernel times already priced (a ring's steps and a step's layers repeat their shapes).
    kernel_times: std::cell::RefCell<std::collections::HashMap<KernelShape, f64>>,
}

impl<'a> Pricer<'a> {
    /// A pricer for the p devices of `w`'s group (and its cp context-parallel ranks).
    fn new(w: &'a Workload) -> Self {
        let cost = CostModel::new(&w.hardware);
        let group: Vec<u32> = (0..w.p as u32).collect();
        let cp = w.outer.cp;
        let cp_group: Vec<u32> = (0..cp as u32).map(|c| c * w.p as u32).collect();
        Pricer {
            cost,
            p: w.p,
            path: path_of(&cost, &group),
            group,
            cp,
            cp_path: path_of(&cost, &cp_group),
            sigma: cost.overlap_slowdown(),
            collectives: Default::default(),
            memo: crate::cost::memo::memo(&w.hardware),
            kernel_times: Default::default(),
        }
    }

    /// Members of a ring's group and the links it crosses at the narrowest.
    fn axis(&self, axis: Axis) -> (u64, PathFigures) {
        match axis {
            Axis::Method => (self.p, self.path),
            Axis::Context => (self.cp, self.cp_path),
        }
    }

    /// `α + bytes / B` of one message over a group of `n` crossing `path` (0 for one device).
    fn message_over(&self, bytes: u64, n: u64, path: PathFigures) -> f64 {
        if n <= 1 {
            return 0.0;
        }
        path.latency_s + bytes as f64 / path.flow_bytes_per_s
    }

    fn kernels(&self, ks: &[Kernel]) -> f64 {
        ks.iter().map(|k| self.kernel_s(&k.shape)).sum()
    }

    /// `CostModel::kernel_s`, each shape priced once.
    fn kernel_s(&self, shape: &KernelShape) -> f64 {
        if let Some(&t) = self.kernel_times.borrow().get(shape) {
            return t;
        }
        let t = self.cost.kernel_s(shape);
        self.kernel_times.borrow_mut().insert(*shape, t);
        t
    }

    fn message(&self, bytes: u64) -> f64 {
        if self.p <= 1 {
            return 0.0;
        }
        self.path.latency_s + bytes as f64 / self.path.flow_bytes_per_s
    }

    /// A collective over `devices` with the algorithm the profile picks.
    fn collective(&self, op: CollectiveOp, devices: &[u32], bytes: u64) -> f64 {
        let key = (op, devices.to_vec(), bytes);
        if let Some(&t) = self.collectives.borrow().get(&key) {
            return t;
        }
        let t = self
            .memo
            .get_or(&key, || self.cost.collective_s(op, devices, bytes));
        self.collectives.borrow_mut().insert(key, t);
        t
    }

    fn stages(&self, stages: &[Stage]) -> PartTimes {
        let mut c = Clock::default();
        for s in stages {
            self.stage(&mut c, s);
        }
        c.total()
    }

    fn stage(&self, c: &mut Clock, s: &Stage) {
        match s {
            Stage::Compute(ks) => {
                for k in ks {
                    let d = self.kernel_s(&k.shape);
                    c.t = c.run(c.t, d, self.sigma);
                }
            }
            Stage::Collective { op, bytes, .. } => {
                if self.p > 1 {
                    let m = self.collective(*op, &self.group, *bytes);
                    c.transfer(c.t, m);
                    c.t += m;
                }
            }
            Stage::Ring(r) => self.ring(c, r),
            Stage::Outer(o) => self.outer(c, o),
        }
    }

    /// A ring, step by step, with the same dependencies as its lowering: step k's kernels wait
    /// for the previous step and for the prefetch of hop k−1; hop k's prefetch starts when hop
    /// k−1 has landed and a receive buffer is free (after step k−1 with two buffers, after
    /// step k with one); the accumulate of step k waits for the accumulator hop k−1; each
    /// accumulator hop follows its accumulate, and the last one returns to the owner.
    fn ring(&self, c: &mut Clock, r: &Ring) {
        let steps = r.steps.len();
        let (n, path) = self.axis(r.axis);
        let comm = n > 1;
        let m = self.message_over(r.prefetch_bytes, n, path);
        let ma = if r.accumulator_bytes > 0 {
            self.message_over(r.accumulator_bytes, n, path)
        } else {
            0.0
        };
        let t0 = c.t;
        let (mut prev_main_end, mut prev_end) = (t0, t0);
        let mut pre_arrival: Option<f64> = None;
        let mut acc_arrival: Option<f64> = None;
        for (k, step) in r.steps.iter().enumerate() {
            // The critical device: the one whose block's kernels take longest at this step.
            let busiest = step
                .present(n as usize, k)
                .iter()
                .map(|&b| step.kernels_of(b))
                .max_by(|a, b| self.kernels(a).total_cmp(&self.kernels(b)))
                .unwrap_or(&[]);
            let hop = comm && k + 1 < steps;
            let pre_ready = pre_arrival.unwrap_or(t0);
            if hop && r.buffers >= 2 {
                let start = pre_ready.max(prev_main_end);
                c.transfer(start, m);
            }
            let mut t = prev_end.max(pre_arrival.unwrap_or(t0));
            for kern in busiest {
                let d = self.kernel_s(&kern.shape);
                t = c.run(t, d, self.sigma);
            }
            let main_end = t;
            let this_pre = if hop {
                let start = if r.buffers >= 2 {
                    pre_ready.max(prev_main_end)
                } else {
                    let s = pre_ready.max(main_end);
                    c.transfer(s, m);
                    s
                };
                Some(start + m)
            } else {
                None
            };
            if !step.accumulate.is_empty() || (ma > 0.0 && comm) {
                t = t.max(acc_arrival.unwrap_or(t0));
                for kern in &step.accumulate {
                    let d = self.kernel_s(&kern.shape);
                    t = c.run(t, d, self.sigma);
                }
                if ma > 0.0 && comm {
                    c.transfer(t, ma);
                    acc_arrival = Some(t + ma);
                }
            }
            prev_main_end = main_end;
            prev_end = t;
            if this_pre.is_some() {
                pre_arrival = this_pre;
            }
        }
        c.t = prev_end.max(acc_arrival.unwrap_or(prev_end));
    }

    /// Time to bring one group's weights (or gradients) to every device.
    fn fetch(&self, o: &Outer, bytes: u64) -> f64 {
        if self.p <= 1 {
            return 0.0;
        }
        match o.exchange {
            Exchange::Chain => (self.p - 1) as f64 * self.message(bytes),
            Exchange::Broadcast => {
                self.collective(CollectiveOp::Broadcast { root: 0 }, &self.group, bytes)
            }
        }
    }

    /// METP's outer loop with the lowering's dependencies: group g+1's weights start moving
    /// when group g starts (two buffers) or ends (one); group g+1 starts when both its weights
    /// and group g are done; weight gradients go back to their owner after each group.
    ///
    /// A broadcast is a collective: every device takes part for its whole duration. A chain is
    /// a relay along the ring, so successive chains pipeline one hop apart: the first group's
    /// weights take the whole chain, later ones arrive one hop `h` after the previous, and each
    /// device has communication in flight only while it receives and forwards (2h per group).
    /// Gradient returns pipeline the same way, one hop apart, the last one exposed.
    fn outer(&self, c: &mut Clock, o: &Outer) {
        let chain = o.exchange == Exchange::Chain;
        let p = self.p;
        let w = self.fetch(o, o.weight_bytes);
        let g = if o.grad_bytes > 0 {
            self.fetch(o, o.grad_bytes)
        } else {
            0.0
        };
        let (hw, hg) = if chain && p > 1 {
            (self.message(o.weight_bytes), self.message(o.grad_bytes))
        } else {
            (w, g)
        };
        let in_flight = |h: f64| if chain && p > 2 { 2.0 * h } else { h };
        c.transfer(c.t, in_flight(hw).min(w));
        let mut ready = c.t + w;
        let mut grad_end = f64::NEG_INFINITY;
        for gi in 0..o.groups {
            let more = gi + 1 < o.groups;
            let start = c.t.max(ready);
            c.t = start;
            let mut next_ready = None;
            if more && o.buffers >= 2 && p > 1 {
                c.transfer(start, in_flight(hw));
                next_ready = Some(start + hw);
            }
            for s in &o.body {
                self.stage(c, s);
            }
            if g > 0.0 && p > 1 {
                c.transfer(c.t, in_flight(hg).min(g));
                grad_end = (c.t + g).max(grad_end + hg);
            }
            ready = match next_ready {
                Some(r) => r,
                None if more && p > 1 => {
                    c.transfer(c.t, in_flight(hw).min(w));
                    c.t + w
                }
                None => c.t,
            };
        }
        c.t = c.t.max(grad_end);
    }
}

/// The timeline of one phase on the representative device: the current time, the intervals
/// during which it has communication in flight (compute runs at 1 − σ of its speed inside
/// them), and running totals.
#[derive(Debug, Default)]
struct Clock {
    t: f64,
    slow: Vec<(f64, f64)>,
    /// Intervals that ended at or before `retired_before`, moved out of `slow` so that a run
    /// scans only the transfers still in flight (a phase with many ring steps otherwise costs
    /// the square of its transfers); consulted again only by a run that starts earlier.
    retired: Vec<(f64, f64)>,
    retired_before: f64,
    compute: f64,
    busy: f64,
    comm: f64,
    last_end: f64,
}

impl Clock {
    /// Records a transfer in flight over `[start, start + d)`.
    fn transfer(&mut self, start: f64, d: f64) {
        if d > 0.0 {
            self.slow.push((start, start + d));
            self.comm += d;
            self.last_end = self.last_end.max(start + d);
        }
    }

    /// Runs `work` seconds of full-speed compute from `start`; returns when it ends.
    fn run(&mut self, start: f64, work: f64, sigma: f64) -> f64 {
        self.compute += work;
        if start > self.retired_before {
            let mut retired = std::mem::take(&mut self.retired);
            self.slow.retain(|&x| {
                let keep = x.1 > start;
                if !keep {
                    retired.push(x);
                }
                keep
            });
            self.retired = retired;
            self.retired_before = start;
        }
        let early: &[(f64, f64)] = if start < self.retired_before {
            &self.retired
        } else {
            &[]
        };
        let mut spans: Vec<(f64, f64)> = self
            .slow
            .iter()
            .chain(early)
            .copied()
            .filter(|&(_, b)| b > start)
            .collect();
        spans.sort_by(|x, y| x.0.total_cmp(&y.0));
        let mut merged: Vec<(f64, f64)> = Vec::new();
        for (a, b) in spans {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a.max(start), b)),
            }
        }
        let (mut t, mut left) = (start, work);
        for (a, b) in merged {
            if a > t {
                let free = a - t;
                if left <= free {
                    break;
                }
                left -= free;
                t = a;
            }
            let slow_cap = (b - t) * (1.0 - sigma);
            if left <= slow_cap {
                t += left / (1.0 - sigma);
                left = 0.0;
                break;
            }
            left -= slow_cap;
            t = b;
        }
        let end = t + left;
        self.busy += end - start;
        self.last_end = self.last_end.max(end);
        end
    }

    fn total(&self) -> PartTimes {
        PartTimes {
            wall: self.t.max(self.last_end),
            compute: self.compute,
            busy: self.busy,
            comm: self.comm,
        }
    }
}

/// Micro-batches the closed form of an unpipelined step sums one by one; past them, the ones
/// before the last are priced once and counted.
const MICRO_BATCHES_SUMMED: u32 = 64;

/// Prices a plan in closed form.
pub fn price(w: &ValidWorkload, plan: &StepPlan) -> StepTimes {
    price_walking(w, plan, pipeline::MAX_WALK_OPS)
}

/// The prices a step is made of (the unpipelined step sums them; a pipeline's walk composes
/// them per op).
fn parts(w: &ValidWorkload, plan: &StepPlan, pr: &Pricer) -> pipeline::Parts {
    let emb_f = pr.kernels(&plan.embedding_fwd);
    let emb_b = pr.kernels(&plan.embedding_bwd);
    let replicas = w.dp * w.outer.cp * if plan.grad_sync_over_p { w.p } else { 1 };
    let sync_group = w.replica_group(plan.grad_sync_over_p);
    debug_assert_eq!(sync_group.len() as u64, replicas);
    let gather = if plan.zero3_gather_bytes > 0 {
        pr.collective(
            CollectiveOp::AllGather,
            &sync_group,
            plan.zero3_gather_bytes,
        )
    } else {
        0.0
    };
    let sync = if plan.layer_grad_sync_bytes > 0 {
        pr.collective(plan.grad_sync_op, &sync_group, plan.layer_grad_sync_bytes)
    } else {
        0.0
    };
    // A sharded optimizer state's all-gather of each stage's updated weights after its step.
    let param_gather: Vec<f64> = plan
        .param_gather_bytes
        .iter()
        .map(|&bytes| {
            if bytes > 0 {
                pr.collective(CollectiveOp::AllGather, &sync_group, bytes)
            } else {
                0.0
            }
        })
        .collect();
    // Phases end when all their work has (lowering joins them), so each is priced on its own.
    let blocks = |bs: &[PhaseBlock]| {
        let mut t = PartTimes::default();
        for b in bs {
            t += pr.stages(&b.stages);
        }
        t
    };
    pipeline::Parts {
        emb_f,
        emb_b,
        gather,
        sync,
        param_gather,
        fwd_layer: blocks(&plan.layer_fwd),
        bwd_layer: blocks(&plan.layer_bwd),
        head: pr.stages(&plan.head.stages),
    }
}

/// A lower bound on [`price`]'s step time that costs no walk of a pipeline's orders: the
/// stage whose ops (without waiting for messages or slowing) and optimizer take longest. The
/// planner prices in full only the configurations this bound does not rule out.
pub fn step_lower_bound(w: &ValidWorkload, plan: &StepPlan) -> f64 {
    if w.outer.pp == 1 {
        return price(w, plan).step_time_s;
    }
    let pr = Pricer::new(w);
    let parts = parts(w, plan, &pr);
    pipeline::lower_bound(w, plan, &pr, &parts)
}

/// A fingerprint of the prices `price` composes (their bits): two configurations of one
/// pipeline layout with equal fingerprints have the same closed-form step.
pub fn parts_fingerprint(w: &ValidWorkload, plan: &StepPlan) -> Vec<u64> {
    let pr = Pricer::new(w);
    let p = parts(w, plan, &pr);
    fingerprint_of(plan, &pr, &p)
}

/// [`step_lower_bound`] and [`parts_fingerprint`] together, the parts priced once (what a
/// planner screens every configuration with).
pub fn screen(w: &ValidWorkload, plan: &StepPlan) -> (f64, Vec<u64>) {
    let pr = Pricer::new(w);
    let p = parts(w, plan, &pr);
    let fingerprint = fingerprint_of(plan, &pr, &p);
    // Without a pipeline the bound is the step itself (`step_lower_bound`).
    let bound = if w.outer.pp == 1 {
        price_parts(w, plan, &pr, p, pipeline::MAX_WALK_OPS).step_time_s
    } else {
        pipeline::lower_bound(w, plan, &pr, &p)
    };
    (bound, fingerprint)
}

/// The bits of `p` (and the plan's optimizer and pipeline message) as a fingerprint.
fn fingerprint_of(plan: &StepPlan, pr: &Pricer, p: &pipeline::Parts) -> Vec<u64> {
    let t = |x: PartTimes| {
        [
            x.wall.to_bits(),
            x.compute.to_bits(),
            x.busy.to_bits(),
            x.comm.to_bits(),
        ]
    };
    let (f, b, h) = (t(p.fwd_layer), t(p.bwd_layer), t(p.head));
    let opt: f64 = plan.optimizer.iter().map(|k| pr.kernels(k)).sum();
    let mut bits = vec![
        u64::from(plan.grad_sync_every_micro_batch),
        p.emb_f.to_bits(),
        p.emb_b.to_bits(),
        p.gather.to_bits(),
        p.sync.to_bits(),
        opt.to_bits(),
        plan.pipeline_bytes,
        f[0],
        f[1],
        f[2],
        f[3],
        b[0],
        b[1],
        b[2],
        b[3],
        h[0],
        h[1],
        h[2],
        h[3],
    ];
    bits.extend(p.param_gather.iter().map(|g| g.to_bits()));
    bits
}

/// [`price`], walking a pipeline's 1F1B orders to the end up to `max_walk_ops` ops (beyond,
/// two shorter walks extrapolated: `pipeline`).
fn price_walking(w: &ValidWorkload, plan: &StepPlan, max_walk_ops: u64) -> StepTimes {
    let pr = Pricer::new(w);
    let p = parts(w, plan, &pr);
    price_parts(w, plan, &pr, p, max_walk_ops)
}

/// [`price_walking`] from the parts `pr` priced.
fn price_parts(
    w: &ValidWorkload,
    plan: &StepPlan,
    pr: &Pricer,
    p: pipeline::Parts,
    max_walk_ops: u64,
) -> StepTimes {
    let mut step = PartTimes::default();
    let pipeline::Parts {
        emb_f,
        emb_b,
        gather,
        sync,
        param_gather,
        fwd_layer,
        bwd_layer,
        head,
    } = p;
    if w.outer.pp > 1 || (plan.grad_sync_every_micro_batch && sync > 0.0 && plan.micro_batches > 1)
    {
        return pipeline::price(
            w,
            plan,
            pr,
            max_walk_ops,
            pipeline::Parts {
                emb_f,
                emb_b,
                gather,
                sync,
                param_gather,
                fwd_layer,
                bwd_layer,
                head,
            },
        );
    }
    let layers = plan.layers as f64;
    // Every micro-batch before the last is the same work: past a few, one is priced and counted
    // (the loop's sum, to rounding), so a step of 65,536 micro-batches costs what 2 do.
    let m = plan.micro_batches;
    let (repeat, first) = if m > MICRO_BATCHES_SUMMED {
        let mut one = PartTimes::computing(emb_f);
        for _ in 0..plan.layers {
            one += PartTimes::waiting_on_comm(gather);
            one += fwd_layer;
        }
        one += head;
        for _ in 0..plan.layers {
            one += PartTimes::waiting_on_comm(gather);
            one += bwd_layer;
        }
        one += PartTimes::computing(emb_b);
        step += one.times(f64::from(m - 1));
        (true, m - 1)
    } else {
        (false, 0)
    };
    for mb in first..m {
        let last = mb + 1 == plan.micro_batches;
        debug_assert!(!repeat || last);
        step += PartTimes::computing(emb_f);
        for _ in 0..plan.layers {
            step += PartTimes::waiting_on_comm(gather);
            step += fwd_layer;
        }
        step += head;
        let after_backward = w.options.runtime.grad_sync == GradSync::AfterBackward;
        if last && sync > 0.0 && !after_backward {
            // Each layer's gradients are synchronised on their own stream as soon as its
            // backward ends, one collective after the other, while the layers below gather
            // their weights and run their backward; compute slows by σ while that traffic
            // flows (in proportion to how busy the layer's compute stream is), and whatever is
            // still queued when the embedding's backward ends is waited for by the optimizer.
            let busy_ratio = if bwd_layer.wall > 0.0 {
                bwd_layer.busy / bwd_layer.wall
            } else {
                0.0
            };
            let overlap = |a0: f64, a1: f64, b0: f64, b1: f64| (a1.min(b1) - a0.max(b0)).max(0.0);
            let (mut now, mut queue_end, mut slowed) = (0.0f64, 0.0f64, 0.0f64);
            let mut syncs: Vec<(f64, f64)> = Vec::new();
            for _ in 0..plan.layers {
                let c0 = now + gather;
                let c1 = c0 + bwd_layer.wall;
                let hidden: f64 = syncs.iter().map(|&(s0, s1)| overlap(s0, s1, c0, c1)).sum();
                let ext = pr.sigma * hidden.min(bwd_layer.wall) * busy_ratio;
                slowed += ext;
                now = c1 + ext;
                let start = queue_end.max(now);
                queue_end = start + sync;
                syncs.push((start, queue_end));
            }
            let hidden: f64 = syncs
                .iter()
                .map(|&(s0, s1)| overlap(s0, s1, now, now + emb_b))
                .sum();
            let ext = pr.sigma * hidden.min(emb_b);
            slowed += ext;
            let emb_end = now + emb_b + ext;
            let exposed = (queue_end - emb_end).max(0.0);
            step += PartTimes {
                wall: emb_end + exposed,
                compute: layers * bwd_layer.compute + emb_b,
                busy: layers * bwd_layer.busy + slowed + emb_b,
                comm: layers * (gather + bwd_layer.comm + sync),
            };
        } else {
            for _ in 0..plan.layers {
                step += PartTimes::waiting_on_comm(gather);
                step += bwd_layer;
            }
            step += PartTimes::computing(emb_b);
            if last && after_backward {
                // `config::runtime`: every layer's synchronisation once the backward has ended.
                step += PartTimes::waiting_on_comm(layers * sync);
            }
        }
    }
    let opt = pr.kernels(plan.optimizer.first().map_or(&[][..], Vec::as_slice));
    step += PartTimes::computing(opt);
    step += PartTimes::waiting_on_comm(param_gather.first().copied().unwrap_or(0.0));
    StepTimes {
        step_time_s: step.wall,
        compute_s: step.compute,
        communication_s: step.comm,
        exposed_communication_s: (step.wall - step.busy).max(0.0),
    }
}
