//! Which devices a lowering lays out: every device of the cluster, or one per distinct program.
//!
//! Devices whose programs are the same up to a symmetry of the cluster run the same timeline,
//! so one can stand for all of them (DESIGN §2, "Outer axes"). A symmetry here is a
//! permutation of cluster ranks that maps the step's communication onto itself *and* the
//! network onto itself (every GPU port to a GPU port, every NIC to a NIC, a pair inside a
//! node to a pair inside a node); then each folded-away device's flows are mirror images of a
//! simulated device's, and the simulator's mirrored routing (`sim::network`) loads every link
//! exactly as the whole cluster would. Three are used, each only where it is exact:
//!
//! - **data-parallel replicas**: shifting the replica index by q, where q replicas fill whole
//!   nodes (q · p · cp a multiple of the GPUs per node), rotates whole nodes; it needs dp to be
//!   a multiple of q. Replicas 0..q stay;
//! - **method ranks** (the plan says its ranks are symmetric: not METP, not causal rings):
//!   rotating the ranks of every group of p at once, when a group sits inside one node, every
//!   GPU has its own NIC, and no gradient ring runs over ranks and replicas together (the
//!   replicated-weight methods' p · dp ring, in cluster-rank order, is not mapped onto itself
//!   by that rotation). Rank 0 stays;
//! - **context-parallel ranks** (a non-causal K/V ring): the same for the cp groups, when all
//!   p · cp devices sit inside one node and there is no data parallelism (the gradient ring
//!   over context ranks and replicas is not mapped onto itself either). Context rank 0
//!   stays.
//!
//! Stages are never folded: their programs differ (embedding, head, pipeline position). Nothing
//! is folded on a fabric whose links belong to pairs of devices rather than to one device (an
//! intra-node mesh, a leaf-spine layer) or whose collectives are not all rings (a tree's
//! ranks play different roles): there the mirror images above would not be exact.

use crate::config::{Algorithm, Coord, IntraNodeKind, ValidWorkload};
use crate::schedule::graph::{DeviceId, Placement};
use crate::schedule::stage::StepPlan;

/// Which devices to lay out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Devices {
    /// Every device of the cluster (p · cp · dp · pp), device id = cluster rank.
    All,
    /// One device per distinct program (module docs).
    #[default]
    Distinct,
}

/// The simulated devices and whom they stand for.
#[derive(Debug, Clone)]
pub(crate) struct DeviceMap {
    /// Coordinates of each simulated device.
    pub coords: Vec<Coord>,
    /// Cluster rank of each simulated device.
    pub ranks: Vec<DeviceId>,
    /// For each cluster rank, the simulated device that runs its program.
    pub representative: Vec<DeviceId>,
    /// Whether some devices were folded away.
    pub folded: bool,
}

impl DeviceMap {
    /// The graph's placement (none when every device is simulated).
    pub fn placement(&self) -> Option<Placement> {
        self.folded.then(|| Placement {
            ranks: self.ranks.clone(),
            representative: self.representative.clone(),
        })
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The folds that are exact for `w` and `plan`: (replica period q, fold method ranks, fold
/// context ranks). q = dp means no replica is folded.
pub(crate) fn folds(w: &ValidWorkload, plan: &StepPlan) -> (u64, bool, bool) {
    let hw = &w.hardware;
    let plain_fabric = hw.intra_node.kind != IntraNodeKind::Mesh
        && hw.inter_node.spine.is_none()
        && hw
            .collectives
            .iter()
            .all(|r| r.algorithm == Algorithm::Ring);
    if !plain_fabric {
        return (w.dp, false, false);
    }
    let gpn = w.hardware.gpus_per_node.max(1);
    let own_nic = w.hardware.inter_node.nics_per_node == gpn;
    let (p, cp, dp) = (w.p, w.outer.cp, w.dp);
    let block = p * cp;
    let lcm = block / gcd(block, gpn) * gpn;
    let q = lcm / block;
    let q = if dp > q && dp.is_multiple_of(q) {
        q
    } else {
        dp
    };
    // A ring over a group that spans ranks and replicas (replicated weights synchronised over
    // p · dp, in cluster-rank order) is not mapped onto itself by rotating ranks inside each
    // group, nor one over context ranks and replicas by rotating context ranks.
    let ranks = plan.ranks_symmetric
        && p > 1
        && gpn.is_multiple_of(p)
        && own_nic
        && (!plan.grad_sync_over_p || dp * cp == 1);
    let context =
        plan.context_symmetric && cp > 1 && gpn.is_multiple_of(block) && own_nic && dp == 1;
    (q, ranks, context)
}

/// How many devices `device_map` lays out, without laying them out: the replicas kept, times
/// the stages, times the context and method ranks that are not folded. The guard on a graph's
/// size (`size`) needs it before anything is built.
pub(crate) fn simulated_devices(w: &ValidWorkload, plan: &StepPlan, devices: Devices) -> u64 {
    let (q, ranks, context) = match devices {
        Devices::All => (w.dp, false, false),
        Devices::Distinct => folds(w, plan),
    };
    q.saturating_mul(w.outer.pp)
        .saturating_mul(if context { 1 } else { w.outer.cp })
        .saturating_mul(if ranks { 1 } else { w.p })
}

/// The devices to lay out for `w` (module docs).
pub(crate) fn device_map(w: &ValidWorkload, plan: &StepPlan, devices: Devices) -> DeviceMap {
    let axes = w.axes();
    let n = axes.devices();
    let (q, ranks, context) = match devices {
        Devices::All => (w.dp, false, false),
        Devices::Distinct => folds(w, plan),
    };
    let q = q as u32;
    let canonical = |c: Coord| Coord {
        replica: c.replica % q,
        stage: c.stage,
        cp: if context { 0 } else { c.cp },
        rank: if ranks { 0 } else { c.rank },
    };
    let mut coords = Vec::new();
    let mut ids = vec![DeviceId::MAX; n as usize];
    for r in 0..n {
        let c = axes.coord_of(r);
        if canonical(c) == c {
            ids[r as usize] = coords.len() as DeviceId;
            coords.push(c);
        }
    }
    let representative: Vec<DeviceId> = (0..n)
        .map(|r| ids[axes.rank_of(canonical(axes.coord_of(r))) as usize])
        .collect();
    let ranks_of: Vec<DeviceId> = coords.iter().map(|&c| axes.rank_of(c)).collect();
    debug_assert_eq!(
        coords.len() as u64,
        simulated_devices(w, plan, devices),
        "simulated_devices counts what device_map lays out"
    );
    DeviceMap {
        folded: coords.len() < n as usize,
        coords,
        ranks: ranks_of,
        representative,
    }
}
