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

mod gather_ahead;
mod overlap;
mod pipeline;
mod pricer;

pub use overlap::{solve_thresholds, thresholds, SolvedThresholds, Thresholds};
pub(crate) use pricer::PartTimes;
use pricer::Pricer;

use crate::config::{GradSync, ValidWorkload};
use crate::cost::CostModel;
use crate::schedule::KernelShape;
use crate::schedule::{
    Axis, CollectiveOp, Exchange, Kernel, Outer, PhaseBlock, Ring, Stage, StepPlan, StepTimes,
};

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
    // Each stage's collectives over its replica group that spans the most nodes: where nodes
    // do not divide the layout, a stage waits for a straddling group, not for its first
    // device's (`config::groups`).
    let groups: Vec<Vec<u32>> = (0..w.outer.pp as u32)
        .map(|s| w.widest_replica_group_in(s, plan.grad_sync_over_p))
        .collect();
    debug_assert!(groups.iter().all(|g| g.len() as u64 == replicas));
    let per_stage =
        |f: &dyn Fn(&[u32]) -> f64| -> Vec<f64> { groups.iter().map(|g| f(g)).collect() };
    // An all-gather of `bytes` per device over the devices holding the same weights (0: none).
    let all_gather = |group: &[u32], bytes: u64| {
        if bytes > 0 {
            pr.collective(CollectiveOp::AllGather, group, bytes)
        } else {
            0.0
        }
    };
    // ZeRO-3's gather of one layer's weights.
    let gather = per_stage(&|g| all_gather(g, plan.zero3_gather_bytes));
    let sync = per_stage(&|g| {
        if plan.layer_grad_sync_bytes > 0 {
            pr.collective(plan.grad_sync_op, g, plan.layer_grad_sync_bytes)
        } else {
            0.0
        }
    });
    // A sharded optimizer state's all-gather of each stage's updated weights after its step,
    // or, overlapped, of one layer's in the first micro-batch's forward.
    let first_gather = per_stage(&|g| all_gather(g, plan.first_forward_gather_bytes));
    let param_gather: Vec<f64> = plan
        .param_gather_bytes
        .iter()
        .enumerate()
        .map(|(s, &b)| all_gather(&groups[s.min(groups.len() - 1)], b))
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
        first_gather,
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
        opt.to_bits(),
        plan.pipeline_bytes,
        plan.pipeline_gather_bytes,
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
    for v in [&p.gather, &p.sync, &p.param_gather, &p.first_gather] {
        bits.extend(v.iter().map(|g| g.to_bits()));
    }
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
        first_gather,
        fwd_layer,
        bwd_layer,
        head,
    } = p;
    if w.outer.pp > 1
        || (plan.grad_sync_every_micro_batch && sync[0] > 0.0 && plan.micro_batches > 1)
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
                first_gather,
                fwd_layer,
                bwd_layer,
                head,
            },
        );
    }
    // One stage.
    let (gather, sync, first_gather) = (gather[0], sync[0], first_gather[0]);
    let layers = plan.layers as f64;
    // Every micro-batch before the last is the same work: past a few, one is priced and counted
    // (the loop's sum, to rounding), so a step of 65,536 micro-batches costs what 2 do.
    let m = plan.micro_batches;
    // A forward or backward run of every layer, ZeRO-3's weights gathered one layer ahead.
    let add_layers = |into: &mut PartTimes, layer| {
        gather_ahead::add_run(into, u64::from(plan.layers), gather, layer, pr.sigma);
    };
    // The first micro-batch's forward, which gathers the updated weights one layer ahead when
    // that is overlapped (`config::ParamGather`).
    // The first layer's gather is issued at the step's start, before the embedding's forward.
    let add_first_forward = |into: &mut PartTimes| {
        if first_gather > 0.0 {
            let n = u64::from(plan.layers);
            let from = (first_gather, first_gather - emb_f);
            gather_ahead::add_run_from(into, n, from, fwd_layer, pr.sigma);
        } else {
            add_layers(into, fwd_layer);
        }
    };
    let (repeat, first) = if m > MICRO_BATCHES_SUMMED {
        let mut one = PartTimes::computing(emb_f);
        add_layers(&mut one, fwd_layer);
        one += head;
        add_layers(&mut one, bwd_layer);
        one += PartTimes::computing(emb_b);
        if first_gather > 0.0 {
            let mut first_one = PartTimes::computing(emb_f);
            add_first_forward(&mut first_one);
            first_one += head;
            add_layers(&mut first_one, bwd_layer);
            first_one += PartTimes::computing(emb_b);
            step += first_one;
            step += one.times(f64::from(m - 2));
        } else {
            step += one.times(f64::from(m - 1));
        }
        (true, m - 1)
    } else {
        (false, 0)
    };
    for mb in first..m {
        let last = mb + 1 == plan.micro_batches;
        debug_assert!(!repeat || last);
        step += PartTimes::computing(emb_f);
        if mb == 0 {
            add_first_forward(&mut step);
        } else {
            add_layers(&mut step, fwd_layer);
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
            let overlap = gather_ahead::overlap;
            let (mut now, mut queue_end, mut slowed) = (0.0f64, 0.0f64, 0.0f64);
            let mut syncs: Vec<(f64, f64)> = Vec::new();
            let mut gathers = gather_ahead::GatherAhead::start(gather, now);
            for l in 0..plan.layers {
                let (c0, next) = gathers.layer(now, l + 1 < plan.layers);
                let c1 = c0 + bwd_layer.wall;
                // What flows beside the compute: the synchronisations and the next layer's
                // gather, counted once where both do.
                let in_syncs = |a: f64, b: f64| -> f64 {
                    syncs.iter().map(|&(s0, s1)| overlap(s0, s1, a, b)).sum()
                };
                let hidden = in_syncs(c0, c1)
                    + next.map_or(0.0, |(a, b)| {
                        overlap(a, b, c0, c1) - in_syncs(a.max(c0), b.min(c1))
                    });
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
            add_layers(&mut step, bwd_layer);
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
