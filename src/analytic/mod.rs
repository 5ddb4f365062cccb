//! Closed-form step time: prices a method's [`StepPlan`] stage by stage, without the event
//! engine, so that the two can check each other (DESIGN §3: with ideal links they must agree
//! within 1%).
//!
//! Every devices of a group is assumed to follow the same timeline (the critical device's, for
//! causal rings whose per-device work differs). Per stage:
//! - compute: the sum of its kernels' roofline times (`cost`);
//! - a blocking collective: `steps × (α + chunk / B)` (`cost::collective_steps`), B the
//!   narrowest link the group crosses;
//! - a ring with two receive buffers: the transfer for step k+1 starts with step k, so step k
//!   lasts `D(C_k, M)` — M when the transfer is longer, else `C_k + σ·M` because compute runs
//!   at (1 − σ) of its speed while a transfer is in flight (σ = the profile's overlap slowdown);
//!   with one buffer the transfer follows the compute: `C_k + M`. Traveling accumulators add a
//!   dependency on the previous hop and a final hop back to the owner;
//! - METP's outer loop: the first group's weights are exposed, later groups' fetches hide
//!   behind the previous group's body when two buffers allow it, and weight-gradient returns
//!   queue behind the bodies.
//!
//! Depends on `config`, `cost`, `memory` and `schedule`'s plan types; never on `sim`.

mod overlap;

pub use overlap::{thresholds, Thresholds};

use serde::Serialize;

use crate::config::Workload;
use crate::cost::{collective_steps, CostModel, LinkClass};
use crate::error::Result;
use crate::memory;
use crate::schedule::{self, CollectiveOp, Exchange, Kernel, Outer, Ring, Stage, StepPlan};

/// Closed-form estimate of one training step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// Step time.
    pub step_time_s: f64,
    /// Compute time on the critical device, at full speed.
    pub compute_s: f64,
    /// Communication time (sum of transfer and collective durations on the critical path's
    /// device, overlapped or not).
    pub communication_s: f64,
    /// `step_time − compute`: time the step is longer than its compute.
    pub exposed_communication_s: f64,
    /// Peak bytes per device (the memory inventory's).
    pub peak_bytes: u128,
    /// Tokens per second over all devices.
    pub tokens_per_s: f64,
    /// Model FLOPs utilisation.
    pub mfu: f64,
}

/// Accumulated times of a part of the step.
#[derive(Debug, Clone, Copy, Default)]
struct T {
    wall: f64,
    compute: f64,
    comm: f64,
}

impl std::ops::AddAssign for T {
    fn add_assign(&mut self, o: T) {
        self.wall += o.wall;
        self.compute += o.compute;
        self.comm += o.comm;
    }
}

struct Pricer<'a> {
    cost: CostModel<'a>,
    p: u64,
    /// Link class a ring over the group crosses at its narrowest.
    class: LinkClass,
    sigma: f64,
}

impl Pricer<'_> {
    fn kernels(&self, ks: &[Kernel], scale: f64) -> f64 {
        if scale == 0.0 {
            return 0.0;
        }
        ks.iter()
            .map(|k| self.cost.compute_s(k.op, k.flops * scale, k.bytes * scale))
            .sum()
    }

    fn message(&self, bytes: u64) -> f64 {
        if self.p <= 1 {
            return 0.0;
        }
        self.cost.p2p_latency_s(self.class) + bytes as f64 / self.cost.link_bytes_per_s(self.class)
    }

    fn collective(&self, op: CollectiveOp, n: u64, bytes: u64, class: LinkClass) -> f64 {
        let (steps, chunk) = collective_steps(op, n, bytes);
        steps as f64
            * (self.cost.p2p_latency_s(class) + chunk as f64 / self.cost.link_bytes_per_s(class))
    }

    /// A step of compute `c` overlapped with a transfer `m` that starts with it.
    fn overlapped(&self, c: f64, m: f64) -> f64 {
        if m <= 0.0 {
            c
        } else if c <= m * (1.0 - self.sigma) {
            m
        } else {
            c + self.sigma * m
        }
    }

    fn stages(&self, stages: &[Stage]) -> T {
        let mut t = T::default();
        for s in stages {
            t += self.stage(s);
        }
        t
    }

    fn stage(&self, s: &Stage) -> T {
        match s {
            Stage::Compute(ks) => {
                let c = self.kernels(ks, 1.0);
                T {
                    wall: c,
                    compute: c,
                    comm: 0.0,
                }
            }
            Stage::Collective { op, bytes, .. } => {
                if self.p <= 1 {
                    return T::default();
                }
                let m = self.collective(*op, self.p, *bytes, self.class);
                T {
                    wall: m,
                    compute: 0.0,
                    comm: m,
                }
            }
            Stage::Ring(r) => self.ring(r),
            Stage::Outer(o) => self.outer(o),
        }
    }

    fn ring(&self, r: &Ring) -> T {
        let steps = r.steps.len();
        let m = self.message(r.prefetch_bytes);
        let ma = if r.accumulator_bytes > 0 {
            self.message(r.accumulator_bytes)
        } else {
            0.0
        };
        let mut t = T::default();
        // Times relative to the ring's start: end of the previous step's work, and when the
        // previous accumulator hop landed.
        let mut acc_arrival = 0.0f64;
        for (k, step) in r.steps.iter().enumerate() {
            // The critical device: the one with the most work at this step.
            let scale = step.fraction.iter().copied().fold(f64::NAN, f64::max);
            let scale = if scale.is_nan() { 1.0 } else { scale };
            let c = self.kernels(&step.kernels, scale);
            let a = self.kernels(&step.accumulate, 1.0);
            let transfer = k + 1 < steps && self.p > 1;
            let main = if !transfer {
                c
            } else if r.buffers >= 2 {
                self.overlapped(c, m)
            } else {
                c + m
            };
            let start = t.wall;
            let mut end = start + main;
            if a > 0.0 || ma > 0.0 {
                // The accumulator of the previous step must have arrived.
                end = end.max(acc_arrival) + a;
                acc_arrival = end + ma;
            }
            t.wall = end;
            t.compute += c + a;
            if transfer {
                t.comm += m;
            }
            t.comm += ma;
        }
        if ma > 0.0 && self.p > 1 {
            // Final hop of the accumulator back to its owner.
            t.wall = t.wall.max(acc_arrival);
        }
        t
    }

    fn fetch(&self, o: &Outer, bytes: u64) -> f64 {
        if self.p <= 1 {
            return 0.0;
        }
        match o.exchange {
            Exchange::Chain => (self.p - 1) as f64 * self.message(bytes),
            Exchange::Broadcast => self.collective(
                CollectiveOp::Broadcast { root: 0 },
                self.p,
                bytes,
                self.class,
            ),
        }
    }

    fn outer(&self, o: &Outer) -> T {
        let body = self.stages(&o.body);
        let w = self.fetch(o, o.weight_bytes);
        let g = if o.grad_bytes > 0 {
            self.fetch(o, o.grad_bytes)
        } else {
            0.0
        };
        let mut t = T {
            wall: w,
            compute: 0.0,
            comm: w,
        };
        let mut grad_done = 0.0f64;
        for gi in 0..o.groups {
            let more = gi + 1 < o.groups;
            let dur = if more && o.buffers >= 2 {
                // The next group's weights move during this body.
                body.wall.max(w)
            } else if more {
                body.wall + w
            } else {
                body.wall
            };
            let body_end = t.wall + body.wall;
            t.wall += dur;
            t.compute += body.compute;
            t.comm += body.comm + if more { w } else { 0.0 };
            if g > 0.0 {
                grad_done = grad_done.max(body_end) + g;
                t.comm += g;
            }
        }
        t.wall = t.wall.max(grad_done);
        t
    }
}

/// Model FLOPs of one step (no recomputation): 6 FLOPs per parameter per token for the GEMMs
/// (layers and head), plus attention scores 12·b·s²·h per layer (4 forward, 8 backward),
/// halved under causal masking.
pub fn model_flops(w: &Workload) -> f64 {
    let m = &w.model;
    let tokens = (w.seq * w.micro_batch * w.micro_batches * w.dp) as f64;
    let gemm_params = (m.layers * (m.attention_params_per_layer() + m.mlp_params_per_layer())
        + m.vocab * m.hidden) as f64;
    let causal = if w.options.causal { 0.5 } else { 1.0 };
    let s = w.seq as f64;
    let attn = 12.0
        * s
        * s
        * m.hidden as f64
        * m.layers as f64
        * causal
        * (w.micro_batch * w.micro_batches * w.dp) as f64;
    6.0 * gemm_params * tokens + attn
}

/// Devices that hold the same weights as device 0 (ZeRO gathers and gradient
/// synchronisation): all p·dp for replicated-weight plans, else rank 0 of every replica.
pub fn sync_group(w: &Workload, over_p: bool) -> Vec<u32> {
    let (p, dp) = (w.p as u32, w.dp as u32);
    if over_p {
        (0..p * dp).collect()
    } else {
        (0..dp).map(|r| r * p).collect()
    }
}

/// Prices a plan.
pub fn price(w: &Workload, plan: &StepPlan, peak_bytes: u128) -> Estimate {
    let cost = CostModel::new(&w.hardware);
    let pr = Pricer {
        cost,
        p: w.p,
        class: cost.group_class(&(0..w.p as u32).collect::<Vec<_>>()),
        sigma: cost.overlap_slowdown(),
    };
    let mut step = T::default();
    let emb_f = pr.kernels(&plan.embedding_fwd, 1.0);
    let emb_b = pr.kernels(&plan.embedding_bwd, 1.0);
    let replicas = if plan.grad_sync_over_p {
        w.p * w.dp
    } else {
        w.dp
    };
    let sync_class = cost.group_class(&sync_group(w, plan.grad_sync_over_p));
    let gather = if plan.zero3_gather_bytes > 0 {
        pr.collective(
            CollectiveOp::AllGather,
            replicas,
            plan.zero3_gather_bytes,
            sync_class,
        )
    } else {
        0.0
    };
    let sync = if plan.layer_grad_sync_bytes > 0 {
        pr.collective(
            plan.grad_sync_op,
            replicas,
            plan.layer_grad_sync_bytes,
            sync_class,
        )
    } else {
        0.0
    };
    let fwd_layer = pr.stages(
        &plan
            .layer_fwd
            .iter()
            .flat_map(|b| b.stages.clone())
            .collect::<Vec<_>>(),
    );
    let bwd_layer = pr.stages(
        &plan
            .layer_bwd
            .iter()
            .flat_map(|b| b.stages.clone())
            .collect::<Vec<_>>(),
    );
    let head = pr.stages(&plan.head.stages);
    let layers = plan.layers as f64;
    for mb in 0..plan.micro_batches {
        let last = mb + 1 == plan.micro_batches;
        step += T {
            wall: emb_f,
            compute: emb_f,
            comm: 0.0,
        };
        for _ in 0..plan.layers {
            step += T {
                wall: gather,
                compute: 0.0,
                comm: gather,
            };
            step += fwd_layer;
        }
        step += head;
        if last && sync > 0.0 {
            // Each layer's gradients are synchronised on their own stream while the layers
            // below run their backward; compute slows by σ while that traffic flows, and
            // whatever has not finished when the backward ends is exposed.
            let per_layer = gather + bwd_layer.wall;
            let mut queue_end = 0.0f64;
            let mut now = 0.0f64;
            let mut slowed = 0.0;
            for _ in 0..plan.layers {
                now += per_layer;
                let start = queue_end.max(now);
                queue_end = start + sync;
                slowed += pr.sigma * sync.min(per_layer);
            }
            // The last layer's synchronisation has no backward left to hide behind.
            slowed -= pr.sigma * sync.min(per_layer);
            let bwd_end = now + slowed;
            let exposed = (queue_end + slowed - bwd_end).max(0.0);
            step += T {
                wall: layers * gather + layers * bwd_layer.wall + slowed + exposed + emb_b,
                compute: layers * bwd_layer.compute + emb_b,
                comm: layers * (gather + bwd_layer.comm + sync),
            };
        } else {
            for _ in 0..plan.layers {
                step += T {
                    wall: gather,
                    compute: 0.0,
                    comm: gather,
                };
                step += bwd_layer;
            }
            step += T {
                wall: emb_b,
                compute: emb_b,
                comm: 0.0,
            };
        }
    }
    let opt = pr.kernels(&plan.optimizer, 1.0);
    step += T {
        wall: opt,
        compute: opt,
        comm: 0.0,
    };
    let tokens = (w.seq * w.micro_batch * w.micro_batches * w.dp) as f64;
    let devices = (w.p * w.dp) as f64;
    let peak = w.hardware.gpu.peak_bf16_flops_per_s.value;
    Estimate {
        step_time_s: step.wall,
        compute_s: step.compute,
        communication_s: step.comm,
        exposed_communication_s: (step.wall - step.compute).max(0.0),
        peak_bytes,
        tokens_per_s: tokens / step.wall,
        mfu: model_flops(w) / (step.wall * peak * devices),
    }
}

/// Estimates a workload: its plan, priced in closed form.
pub fn estimate(w: &Workload) -> Result<Estimate> {
    let inv = memory::inventory(w)?;
    let plan = schedule::plan(w)?;
    Ok(price(w, &plan, inv.peak_bytes))
}
