//! Data-parallel synchronisation in the lowered graph: each layer's gradient all-reduce (or
//! reduce-scatter), ZeRO-3's weight all-gathers and, with a sharded optimizer state below
//! ZeRO-3, the all-gather of the updated weights after the step, over the devices that hold the
//! same weights.

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
    let mut out = Vec::new();
    for group in sync_groups(l, plan.grad_sync_over_p) {
        if group.len() < 2 {
            continue;
        }
        let id = l.fresh();
        for dev in l.members(&group) {
            let deps = l.frontier[dev as usize].clone();
            let t = l.g.add(
                dev,
                ASYNC,
                Work::Collective {
                    op: plan.grad_sync_op,
                    id,
                    group: group.clone(),
                    bytes: plan.layer_grad_sync_bytes,
                },
                deps,
                l.label,
            );
            out.push((dev, t));
        }
    }
    out
}

pub(super) fn zero3_gather(l: &mut Lower<'_>, plan: &StepPlan) {
    l.label.name = "zero3-all-gather";
    blocking_gather(l, plan, plan.zero3_gather_bytes);
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
    l.label.name = "param-all-gather";
    blocking_gather(l, plan, bytes);
}

/// An all-gather of `bytes` per device over each group holding the same weights, on the
/// stream the compute stream waits for.
fn blocking_gather(l: &mut Lower<'_>, plan: &StepPlan, bytes: u64) {
    for group in sync_groups(l, plan.grad_sync_over_p) {
        if group.len() < 2 {
            continue;
        }
        let id = l.fresh();
        for dev in l.members(&group) {
            let deps = std::mem::take(&mut l.frontier[dev as usize]);
            let t = l.g.add(
                dev,
                BLOCKING,
                Work::Collective {
                    op: CollectiveOp::AllGather,
                    id,
                    group: group.clone(),
                    bytes,
                },
                deps,
                l.label,
            );
            l.frontier[dev as usize] = vec![t];
        }
    }
}
