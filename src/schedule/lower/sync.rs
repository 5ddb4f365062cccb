//! Data-parallel synchronisation in the lowered graph: each layer's gradient all-reduce (or
//! reduce-scatter) and ZeRO-3's weight all-gathers, over the devices that hold the same weights.

use super::*;

/// The devices that hold the same weights: all p·dp for replicated-weight plans (detected by a
/// ZeRO-3 or sync size equal to the full layer), else the dp replicas of one rank.
fn sync_groups(l: &Lower<'_>, over_p: bool) -> Vec<Vec<DeviceId>> {
    if over_p {
        vec![(0..l.devices()).collect()]
    } else {
        (0..l.p)
            .map(|i| (0..l.dp).map(|r| r * l.p + i).collect())
            .collect()
    }
}

pub(super) fn grad_sync_collective(l: &mut Lower<'_>, plan: &StepPlan) -> Vec<(DeviceId, TaskId)> {
    l.label.name = "grad-sync";
    let mut out = Vec::new();
    for group in sync_groups(l, plan.grad_sync_over_p) {
        if group.len() < 2 {
            continue;
        }
        let id = l.fresh();
        for &dev in &group {
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
    for group in sync_groups(l, plan.grad_sync_over_p) {
        if group.len() < 2 {
            continue;
        }
        let id = l.fresh();
        for &dev in &group {
            let deps = std::mem::take(&mut l.frontier[dev as usize]);
            let t = l.g.add(
                dev,
                BLOCKING,
                Work::Collective {
                    op: CollectiveOp::AllGather,
                    id,
                    group: group.clone(),
                    bytes: plan.zero3_gather_bytes,
                },
                deps,
                l.label,
            );
            l.frontier[dev as usize] = vec![t];
        }
    }
}
