//! Collective algorithms in closed form: what each step moves and what it costs over the links
//! a group crosses. The simulator runs the same steps as flows (`sim::collective`, which reads
//! its step structure from here); the analytic twin prices them with [`collective_s`].
//!
//! `M` is the buffer as nccl-tests sizes the operation, `n` the ranks, α the per-step latency,
//! `B` the bandwidth one transfer gets (the narrowest link of its route: on a mesh the pair's
//! link, through a switch the GPU's port), `P` the port all of one rank's concurrent transfers
//! share (a GPU's NVLink/xGMI total or its NIC). A step in which every rank sends `f` chunks
//! of `c` bytes at once lasts `α + c · max(1/B, f/P)` — the time of its busiest link, which
//! is what max-min sharing gives a symmetric step.
//!
//! | algorithm | op | steps × each step |
//! |---|---|---|
//! | ring | all-reduce | 2(n−1) × (α + ⌈M/n⌉/B) (reduce-scatter, then all-gather) |
//! | ring | all-gather, reduce-scatter, all-to-all (pairwise) | (n−1) × (α + ⌈M/n⌉/B) |
//! | ring | broadcast, reduce | a pipelined chain: (n−1)α + M/B, written (n−1) × (α + ⌈M/(n−1)⌉/B) |
//! | direct | all-gather, reduce-scatter, all-to-all | 1 × (α + ⌈M/n⌉ · max(1/B, (n−1)/P)) |
//! | direct | all-reduce | 2 × the same (reduce-scatter, then all-gather) |
//! | direct | broadcast, reduce | 1 × (α + M · max(1/B, (n−1)/P)) (the root's port carries n−1 copies) |
//! | tree | broadcast, reduce | ⌈log2 n⌉ × (α + M/B) (binomial; a rank sends or receives one copy per step) |
//! | tree | all-reduce | 2⌈log2 n⌉ × (α + M/B) (reduce to the first rank, then broadcast) |
//!
//! On a full mesh (P = (n−1)·B for 8 MI300X: 7 links of B each) a direct exchange moves every
//! chunk on its own link at once — n−1 times the bandwidth of a ring, whose hops use one link
//! each. Through a switch (P = B) direct and ring move the same bytes through each port, and
//! direct saves only the n−2 extra latencies. With `LinkModel::Ideal` the simulator gives every
//! flow its narrowest link whatever else is in flight, so a direct step through a switch is
//! optimistic there (c/B instead of (n−1)c/B); with max-min sharing it equals this closed form.

use crate::config::{Algorithm, CollectiveKind};
use crate::schedule::CollectiveOp;

/// The operation's kind in the profile's rule table.
pub fn kind(op: CollectiveOp) -> CollectiveKind {
    match op {
        CollectiveOp::AllReduce => CollectiveKind::AllReduce,
        CollectiveOp::AllGather => CollectiveKind::AllGather,
        CollectiveOp::ReduceScatter => CollectiveKind::ReduceScatter,
        CollectiveOp::AllToAll => CollectiveKind::AllToAll,
        CollectiveOp::Broadcast { .. } => CollectiveKind::Broadcast,
        CollectiveOp::Reduce { .. } => CollectiveKind::Reduce,
    }
}

/// The algorithm that actually runs: a tree cannot run all-gather, reduce-scatter or
/// all-to-all, which then run as a ring (the rule table never picks that, see
/// [`crate::config::tree_runs`]).
pub fn effective(algorithm: Algorithm, op: CollectiveOp) -> Algorithm {
    if algorithm == Algorithm::Tree && !crate::config::tree_runs(kind(op)) {
        Algorithm::Ring
    } else {
        algorithm
    }
}

/// ⌈log2 n⌉ for n ≥ 1.
pub fn log2_ceil(n: u64) -> u64 {
    if n <= 1 {
        0
    } else {
        64 - (n - 1).leading_zeros() as u64
    }
}

/// Number of steps of `op` over `n` ranks with `algorithm`, as the simulator runs them: a ring
/// broadcast or reduce is one step (a pipelined chain whose hops are all in flight at once).
pub fn steps(algorithm: Algorithm, op: CollectiveOp, n: u64) -> u64 {
    if n <= 1 {
        return 0;
    }
    match (effective(algorithm, op), op) {
        (Algorithm::Ring, CollectiveOp::Broadcast { .. } | CollectiveOp::Reduce { .. }) => 1,
        (Algorithm::Ring, _) => collective_steps(op, n, 0).0,
        (Algorithm::Direct, CollectiveOp::AllReduce) => 2,
        (Algorithm::Direct, _) => 1,
        (Algorithm::Tree, CollectiveOp::AllReduce) => 2 * log2_ceil(n),
        (Algorithm::Tree, _) => log2_ceil(n),
    }
}

/// How a collective over `n` ranks is broken into steps, as NCCL's ring algorithms do: in every
/// step each rank sends one chunk to its ring successor, and the step ends when all chunks have
/// arrived. Returns (steps, bytes per chunk). The simulator sends these chunks as flows (so
/// they share links with point-to-point traffic); the analytic model prices them as
/// `steps × (α + chunk / B)`.
///
/// - all-reduce of M bytes: 2(n−1) steps of M/n (reduce-scatter, then all-gather);
/// - all-gather (M = output), reduce-scatter (M = input): n−1 steps of M/n;
/// - all-to-all (M = local buffer): n−1 steps of M/n, rank i sending to rank i+k at step k;
/// - broadcast and reduce (M = buffer): NCCL pipelines the buffer through the ring so every
///   link carries it once; n−1 steps of M/(n−1) give the same large-message time, M/B (nccl-tests
///   report busbw = algbw for these), plus (n−1)α.
pub fn collective_steps(op: CollectiveOp, n: u64, bytes: u64) -> (u64, u64) {
    use CollectiveOp as C;
    if n <= 1 {
        return (0, 0);
    }
    match op {
        C::AllReduce => (2 * (n - 1), bytes.div_ceil(n)),
        C::AllGather | C::ReduceScatter | C::AllToAll => (n - 1, bytes.div_ceil(n)),
        C::Broadcast { .. } | C::Reduce { .. } => (n - 1, bytes.div_ceil(n - 1)),
    }
}

/// The links a collective's transfers cross, as figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PathFigures {
    /// α of one step.
    pub latency_s: f64,
    /// Bandwidth one transfer gets alone (its route's narrowest link), bytes/s.
    pub flow_bytes_per_s: f64,
    /// Bandwidth all of one rank's concurrent transfers share (its port), bytes/s.
    pub port_bytes_per_s: f64,
}

impl PathFigures {
    /// One step in which every rank sends `fan` chunks of `chunk` bytes at once.
    pub fn step_s(&self, chunk: f64, fan: u64) -> f64 {
        let bandwidth = self
            .flow_bytes_per_s
            .min(self.port_bytes_per_s / fan.max(1) as f64);
        self.latency_s + chunk / bandwidth
    }
}

/// Seconds of `op` over `n` ranks, `bytes` as nccl-tests sizes it, with `algorithm`, over
/// links with figures `path` (the module's table).
pub fn collective_s(
    algorithm: Algorithm,
    op: CollectiveOp,
    n: u64,
    bytes: u64,
    path: PathFigures,
) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    let algorithm = effective(algorithm, op);
    let steps = steps(algorithm, op, n) as f64;
    match algorithm {
        Algorithm::Ring => {
            // The chain of a broadcast or reduce is priced as n−1 steps of M/(n−1):
            // (n−1)α + M/B, the chain's time.
            let (steps, chunk) = collective_steps(op, n, bytes);
            steps as f64 * path.step_s(chunk as f64, 1)
        }
        Algorithm::Direct => {
            let chunk = match op {
                CollectiveOp::Broadcast { .. } | CollectiveOp::Reduce { .. } => bytes,
                _ => bytes.div_ceil(n),
            };
            steps * path.step_s(chunk as f64, n - 1)
        }
        Algorithm::Tree => steps * path.step_s(bytes as f64, 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SWITCH: PathFigures = PathFigures {
        latency_s: 3e-6,
        flow_bytes_per_s: 200e9,
        port_bytes_per_s: 200e9,
    };
    /// 4 GPUs in a full mesh: 3 links of 50 GB/s, the port drives all three at once.
    const MESH4: PathFigures = PathFigures {
        latency_s: 3e-6,
        flow_bytes_per_s: 50e9,
        port_bytes_per_s: 150e9,
    };

    #[test]
    fn step_counts() {
        let ar = CollectiveOp::AllReduce;
        let bc = CollectiveOp::Broadcast { root: 0 };
        assert_eq!(steps(Algorithm::Ring, ar, 8), 14);
        assert_eq!(steps(Algorithm::Direct, ar, 8), 2);
        assert_eq!(steps(Algorithm::Tree, ar, 8), 6);
        assert_eq!(steps(Algorithm::Tree, bc, 5), 3);
        assert_eq!(steps(Algorithm::Direct, bc, 5), 1);
        // A tree cannot run an all-gather: it runs as a ring.
        assert_eq!(steps(Algorithm::Tree, CollectiveOp::AllGather, 8), 7);
        assert_eq!(log2_ceil(1), 0);
        assert_eq!(log2_ceil(2), 1);
        assert_eq!(log2_ceil(72), 7);
    }

    #[test]
    fn closed_forms_by_hand() {
        let m = 120_000_000u64;
        // Ring all-gather, n = 4: 3 × (α + (M/4)/B).
        let want = 3.0 * (3e-6 + 30e6 / 200e9);
        let got = collective_s(Algorithm::Ring, CollectiveOp::AllGather, 4, m, SWITCH);
        assert!((got - want).abs() < 1e-15, "{got} {want}");
        // Direct all-gather through a switch: one step, the port carries 3 chunks:
        // α + 3 (M/4)/B — the ring's bandwidth term with one α.
        let want = 3e-6 + 3.0 * 30e6 / 200e9;
        let got = collective_s(Algorithm::Direct, CollectiveOp::AllGather, 4, m, SWITCH);
        assert!((got - want).abs() < 1e-15);
        // On a 4-GPU mesh a ring hop gets one 50 GB/s link: 3 × (α + (M/4)/50e9); direct
        // uses the three links at once: α + (M/4)/50e9, three times less bandwidth time.
        let ring = collective_s(Algorithm::Ring, CollectiveOp::AllGather, 4, m, MESH4);
        let direct = collective_s(Algorithm::Direct, CollectiveOp::AllGather, 4, m, MESH4);
        assert!((ring - 3.0 * (3e-6 + 30e6 / 50e9)).abs() < 1e-15);
        assert!((direct - (3e-6 + 30e6 / 50e9)).abs() < 1e-15);
        // Broadcast on the mesh: direct sends M on every link at once, α + M/50e9; the ring
        // chain costs 3α + M/50e9; a binomial tree 2 × (α + M/50e9).
        let bc = CollectiveOp::Broadcast { root: 0 };
        let d = collective_s(Algorithm::Direct, bc, 4, m, MESH4);
        let r = collective_s(Algorithm::Ring, bc, 4, m, MESH4);
        let t = collective_s(Algorithm::Tree, bc, 4, m, MESH4);
        assert!((d - (3e-6 + 120e6 / 50e9)).abs() < 1e-15);
        assert!((r - (3.0 * 3e-6 + 120e6 / 50e9)).abs() < 1e-15);
        assert!((t - 2.0 * (3e-6 + 120e6 / 50e9)).abs() < 1e-15);
        // Direct broadcast through a switch: the root's port carries 3 copies.
        let d = collective_s(Algorithm::Direct, bc, 4, m, SWITCH);
        assert!((d - (3e-6 + 3.0 * 120e6 / 200e9)).abs() < 1e-15);
        // Tree all-reduce: reduce then broadcast, 2 ⌈log2 4⌉ steps of M.
        let t = collective_s(Algorithm::Tree, CollectiveOp::AllReduce, 4, m, SWITCH);
        assert!((t - 4.0 * (3e-6 + 120e6 / 200e9)).abs() < 1e-15);
        assert_eq!(
            collective_s(Algorithm::Direct, CollectiveOp::AllReduce, 1, m, SWITCH),
            0.0
        );
    }
}
