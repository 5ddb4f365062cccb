//! Which devices form a workload's groups — the replicas that hold the same weights, a method
//! group, a context-parallel ring — and, where nodes do not divide the layout (GB200 NVL72 racks
//! of 72 GPUs filled in rank order), which of them spans the most nodes: a step waits for its
//! slowest group, not for device 0's. Reads only the layout's axes and the node size; must not
//! depend on the cost model.

use super::layout::{Axes, Coord};
use super::workload::ValidWorkload;

/// Nodes of `gpus_per_node` devices that `devices` (in order) span: runs of one node count once.
fn nodes_spanned(devices: impl Iterator<Item = u32>, gpus_per_node: u64) -> u32 {
    let (mut n, mut last) = (0u32, None);
    for d in devices {
        let node = u64::from(d) / gpus_per_node;
        if last != Some(node) {
            n += 1;
            last = Some(node);
        }
    }
    n
}

/// The replica group of the devices at `stage` and method rank `rank`, in ring order (every
/// rank when `over_p`).
fn replica_members(a: Axes, stage: u32, rank: u32, over_p: bool) -> impl Iterator<Item = u32> {
    let ranks = if over_p { 0..a.p } else { rank..rank + 1 };
    (0..a.dp).flat_map(move |replica| {
        let ranks = ranks.clone();
        (0..a.cp).flat_map(move |cp| {
            ranks.clone().map(move |rank| {
                a.rank_of(Coord {
                    replica,
                    stage,
                    cp,
                    rank,
                })
            })
        })
    })
}

impl ValidWorkload {
    /// Devices that hold the same weights as device 0 (ZeRO gathers and gradient
    /// synchronisation), as cluster ranks of stage 0: all p · cp · dp when the p devices of a
    /// replica replicate the weights (`over_p`), else rank 0 of every context-parallel rank
    /// and replica.
    pub fn replica_group(&self, over_p: bool) -> Vec<u32> {
        replica_members(self.axes(), 0, 0, over_p).collect()
    }

    /// Of every method group (the p devices of one context rank of one replica of one stage),
    /// the one that spans the most nodes (device 0's on ties): p consecutive ranks, which on
    /// nodes that p does not divide or fill (p = 16 on racks of 72) straddle a node boundary for
    /// some replicas. The closed form prices the method's collectives and rings over it.
    pub fn widest_method_group(&self) -> Vec<u32> {
        let a = self.axes();
        let gpn = self.hardware.gpus_per_node.max(1);
        let group = |base: u32| base..base + a.p;
        let mut best = 0u32;
        if !(gpn.is_multiple_of(u64::from(a.p)) || u64::from(a.p).is_multiple_of(gpn)) {
            for base in (a.p..a.devices()).step_by(a.p as usize) {
                if nodes_spanned(group(base), gpn) > nodes_spanned(group(best), gpn) {
                    best = base;
                }
            }
        }
        group(best).collect()
    }

    /// Of every context-parallel group (the cp devices at one method rank of one replica of
    /// one stage, p apart), the one that spans the most nodes (device 0's on ties).
    pub fn widest_context_group(&self) -> Vec<u32> {
        let a = self.axes();
        let gpn = self.hardware.gpus_per_node.max(1);
        let group = move |base: u32| (0..a.cp).map(move |c| base + c * a.p);
        let span = u64::from(a.p) * u64::from(a.cp);
        let mut best = 0u32;
        if !(a.cp < 2
            || gpn.is_multiple_of(span)
            || (span.is_multiple_of(gpn) && gpn.is_multiple_of(u64::from(a.p))))
        {
            let mut most = nodes_spanned(group(0), gpn);
            for block in 0..a.devices() / (a.p * a.cp) {
                for rank in 0..a.p {
                    let base = block * a.p * a.cp + rank;
                    let n = nodes_spanned(group(base), gpn);
                    if n > most {
                        (best, most) = (base, n);
                    }
                }
            }
        }
        group(best).collect()
    }

    /// Of every stage's and method rank's replica groups, the one that spans the most nodes
    /// (the first such, stage 0 and rank 0 on ties). Where nodes do not divide the layout,
    /// groups differ: some straddle two nodes and synchronise over the network while device 0's
    /// stays on NVLink. The composition prices the weights' gathers over this group. Costs one
    /// pass over the devices.
    pub fn widest_replica_group(&self, over_p: bool) -> Vec<u32> {
        self.widest_of(0..self.axes().pp, over_p)
    }

    /// [`Self::widest_replica_group`] among the groups of stage `stage` alone (the group a
    /// stage's own synchronisations and gathers wait for; the closed form prices each stage's
    /// over its own).
    pub fn widest_replica_group_in(&self, stage: u32, over_p: bool) -> Vec<u32> {
        self.widest_of(stage..stage + 1, over_p)
    }

    fn widest_of(&self, stages: std::ops::Range<u32>, over_p: bool) -> Vec<u32> {
        let a = self.axes();
        let gpn = self.hardware.gpus_per_node.max(1);
        let mut best = (stages.start, 0);
        // Every group spans as many nodes as the first where the stages are whole nodes and
        // the members' spacing (p apart, or every rank) meets node boundaries alike, or where
        // every stage lies inside one node: no scan (a planner asks this of every
        // configuration).
        let stage_devices = u64::from(a.p) * u64::from(a.cp) * u64::from(a.dp);
        let alike = (stage_devices.is_multiple_of(gpn)
            && (over_p || gpn.is_multiple_of(u64::from(a.p))))
            || gpn.is_multiple_of(stage_devices);
        if !alike {
            let span = |(stage, rank)| nodes_spanned(replica_members(a, stage, rank, over_p), gpn);
            let mut most = span(best);
            let ranks = if over_p { 1 } else { a.p };
            for stage in stages {
                for rank in 0..ranks {
                    let n = span((stage, rank));
                    if n > most {
                        (best, most) = ((stage, rank), n);
                    }
                }
            }
        }
        replica_members(a, best.0, best.1, over_p).collect()
    }
}
