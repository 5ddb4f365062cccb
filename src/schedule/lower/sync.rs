//! Data-parallel synchronisation in the lowered graph: each layer's gradient all-reduce (or
//! reduce-scatter), ZeRO-3's weight all-gathers and, with a sharded optimizer state below
//! ZeRO-3, the all-gather of the updated weights after the step — or, overlapped
//! (`config::ParamGather`), layer by layer during the first micro-batch's forward, one layer
//! ahead as ZeRO-3 gathers — over the devices that hold the same weights.
//!
//! ZeRO-3 gathers each layer's weights one layer ahead, as PyTorch FSDP (its forward and
//! backward prefetch, at most two layers' weights unsharded: `limit_all_gathers`) and
//! DeepSpeed's stage 3 (its prefetch bucket) run it, and as the memory inventory counts it
//! (`zero3.gathered_weights`: the layer computing and the next one): a run of layers gathers
//! its first layer's weights before computing it, then, as each layer starts, the next layer's
//! on a stream of their own — after the previous gather and after the compute before it, whose
//! weights' buffer it reuses — and each layer's compute waits for its own gather only.

use super::*;

/// The groups of cluster ranks that hold the same weights as the active devices, in ring
/// (cluster-rank) order: every replica and context-parallel rank of the stage — and every
/// method rank too for replicated-weight plans (`over_p`), else the same method rank.
fn sync_groups(l: &Lower<'_>, over_p: bool) -> Vec<Vec<DeviceId>> {
    let a = l.axes;
    let mut out: Vec<Vec<DeviceId>> = Vec::new();
    for &dev in &l.active {
        let c = l.coords[dev as usize];
        let ranks: Vec<u32> = if over_p {
            (0..a.p).collect()
        } else {
            vec![c.rank]
        };
        let mut group = Vec::with_capacity((a.dp * a.cp) as usize * ranks.len());
        for replica in 0..a.dp {
            for cp in 0..a.cp {
                for &rank in &ranks {
                    group.push(l.rank_at(Coord {
                        replica,
                        stage: c.stage,
                        cp,
                        rank,
                    }));
                }
            }
        }
        group.sort_unstable();
        if !out.contains(&group) {
            out.push(group);
        }
    }
    out
}

pub(super) fn grad_sync_collective(l: &mut Lower<'_>, plan: &StepPlan) -> Vec<(DeviceId, TaskId)> {
    l.label.name = "grad-sync";
    replica_collectives(
        l,
        plan,
        ASYNC,
        (plan.grad_sync_op, plan.layer_grad_sync_bytes),
        &[],
    )
}

/// One collective per group holding the same weights, on `stream`, after each device's compute
/// so far and its tasks in `after`.
fn replica_collectives(
    l: &mut Lower<'_>,
    plan: &StepPlan,
    stream: Stream,
    (op, bytes): (CollectiveOp, u64),
    after: &[(DeviceId, TaskId)],
) -> Vec<(DeviceId, TaskId)> {
    let mut out = Vec::new();
    for group in sync_groups(l, plan.grad_sync_over_p) {
        if group.len() < 2 {
            continue;
        }
        let id = l.fresh();
        for dev in l.members(&group) {
            let mut deps = l.frontier[dev as usize].clone();
            deps.extend(after.iter().filter(|&&(d, _)| d == dev).map(|&(_, t)| t));
            let t = l.g.add(
                dev,
                stream,
                Work::Collective {
                    op,
                    id,
                    group: group.clone(),
                    bytes,
                },
                deps,
                l.label,
            );
            out.push((dev, t));
        }
    }
    out
}

/// The label of the updated weights' all-gather, after the step or in the first forward.
const PARAM_GATHER: &str = "param-all-gather";

/// What a run of layers gathers one layer ahead of its compute: ZeRO-3's weights (each
/// forward and backward), or a sharded optimizer state's updated weights during the first
/// micro-batch's forward (`config::ParamGather::Overlapped`); `None` for neither. Bytes per
/// device of one layer's gather, and its label.
pub(super) fn gathered_ahead(
    plan: &StepPlan,
    forward: bool,
    micro_batch: u32,
) -> Option<(u64, &'static str)> {
    if plan.zero3_gather_bytes > 0 {
        Some((plan.zero3_gather_bytes, "zero3-all-gather"))
    } else if forward && micro_batch == 0 && plan.first_forward_gather_bytes > 0 {
        Some((plan.first_forward_gather_bytes, PARAM_GATHER))
    } else {
        None
    }
}

/// The gather of the first layer of a run of layers that gathers ahead ([`gathered_ahead`];
/// module docs), issued before the run's rounds start so that every layer but the last issues
/// the same tasks (`lower::periodic` declares rounds of equal size).
pub(super) fn gather_first(
    l: &mut Lower<'_>,
    plan: &StepPlan,
    (bytes, name): (u64, &'static str),
) -> Option<Vec<(DeviceId, TaskId)>> {
    label(l, name);
    Some(layer_gathers(l, plan, bytes, &[]))
}

/// The gathers of a layer about to compute (module docs): its own (`pending`, issued one
/// layer earlier, or by [`gather_first`]), and, when layer `next` follows in the run, that
/// one's, left in `pending` (labelled with the layer whose weights it gathers). The compute
/// waits for the layer's own.
pub(super) fn gather_ahead(
    l: &mut Lower<'_>,
    plan: &StepPlan,
    (bytes, name): (u64, &'static str),
    pending: &mut Option<Vec<(DeviceId, TaskId)>>,
    next: Option<u32>,
) {
    label(l, name);
    let own = match pending.take() {
        Some(own) => own,
        None => layer_gathers(l, plan, bytes, &[]),
    };
    if let Some(next) = next {
        let layer = l.label.layer.replace(next);
        *pending = Some(layer_gathers(l, plan, bytes, &own));
        l.label.layer = layer;
    }
    for (dev, t) in own {
        l.frontier[dev as usize].push(t);
    }
}

/// Labels the gathers about to be added: the updated weights' under the block `weights` (the
/// block of the layer before would otherwise name them).
fn label(l: &mut Lower<'_>, name: &'static str) {
    l.label.name = name;
    if name == PARAM_GATHER {
        l.label.block = "weights";
    }
}

/// One all-gather of `bytes` per group holding the same weights, on the gather stream, after
/// each device's compute so far and `after` (its previous gather).
fn layer_gathers(
    l: &mut Lower<'_>,
    plan: &StepPlan,
    bytes: u64,
    after: &[(DeviceId, TaskId)],
) -> Vec<(DeviceId, TaskId)> {
    let what = (CollectiveOp::AllGather, bytes);
    replica_collectives(l, plan, ZERO3_GATHER, what, after)
}

/// The all-gather of stage `stage`'s updated weights after its optimizer step (sharded
/// optimizer state below ZeRO-3): every device waits for it.
pub(super) fn param_gather(l: &mut Lower<'_>, plan: &StepPlan, stage: u32) {
    let bytes = plan
        .param_gather_bytes
        .get(stage as usize)
        .or(plan.param_gather_bytes.last())
        .copied()
        .unwrap_or(0);
    if bytes == 0 {
        return;
    }
    l.label.name = PARAM_GATHER;
    blocking_gather(l, plan, bytes);
}

/// An all-gather of `bytes` per device over each group holding the same weights, on the
/// stream the compute stream waits for.
fn blocking_gather(l: &mut Lower<'_>, plan: &StepPlan, bytes: u64) {
    let what = (CollectiveOp::AllGather, bytes);
    for (dev, t) in replica_collectives(l, plan, BLOCKING, what, &[]) {
        l.frontier[dev as usize] = vec![t];
    }
}
