//! Collectives as the ring steps NCCL runs, so their traffic shares links with point-to-point
//! flows.
//!
//! A collective over a group of `n` devices (in the group's ring order) is a sequence of
//! *steps*. A step costs a latency, then starts all its transfers together; it ends when the
//! last of them has arrived, and the next step starts. `bytes` is the buffer size as nccl-tests
//! defines it (see [`crate::schedule::Work::Collective`]). With `M = bytes`:
//!
//! | op | steps | each step |
//! |---|---|---|
//! | all-reduce | `2(n-1)` (reduce-scatter then all-gather) | every rank sends `M/n` to its ring successor |
//! | reduce-scatter, all-gather | `n-1` | every rank sends `M/n` to its ring successor |
//! | all-to-all | `n-1`; step `k = 1..n-1` | rank `i` sends `M/n` to rank `i+k` (pairwise exchange) |
//! | broadcast, reduce | 1 | a pipelined chain of `n-1` hops, each moving `M` |
//!
//! Latency of a step: the point-to-point α ([`super::Network::latency_ps`]: the profile's
//! `intra_node.p2p_latency_s` or `inter_node.latency_s`) of the slowest hop in the step, since
//! the hops of a ring step run in parallel. This is NCCL's per-step `hwLat` (tuning.cc: Simple
//! protocol, NVLink 3.4 µs, NET 14 µs per step, hardware.md §7.3); NCCL's one-off `baseLat`
//! (≈8 µs) is not charged, and the profile's `collective_latency_s` (a whole small all-reduce)
//! is not used. So with ideal links an `n`-rank ring all-reduce takes `2(n-1)(α + M/(nB))`, the
//! ring formula of Thakur et al. (hardware.md §7.2).
//!
//! All-to-all is modelled as `n-1` pairwise steps rather than all pairs at once: it matches the
//! `(n-1)α + (n-1)/n · M/B` closed form, and each step loads every egress and ingress port once,
//! like a ring step.
//!
//! Broadcast and reduce are a ring chain pipelined in infinitely many chunks (NCCL pipelines the
//! chain in small slices): broadcast runs `root -> root+1 -> … -> root-1`, reduce runs
//! `root+1 -> … -> root`. All `n-1` hops are in flight at once, each carrying `M`, after a
//! latency equal to the sum of the hops' α (the time the first slice needs to reach the end of
//! the chain). With ideal links: `(n-1)α + M/B`.

use crate::schedule::{CollectiveOp, DeviceId};

/// One transfer of a step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Transfer {
    /// Sender.
    pub src: DeviceId,
    /// Receiver.
    pub dst: DeviceId,
    /// Bytes moved.
    pub bytes: f64,
}

/// How the α of a step's hops combine into the step's latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepLatency {
    /// The hops run side by side: the largest α.
    Parallel,
    /// The hops form a pipelined chain: the sum of the α.
    Chain,
}

/// Number of steps of `op` over `n` ranks.
pub fn steps(op: CollectiveOp, n: usize) -> u32 {
    let n = n as u32;
    if n <= 1 {
        return 0;
    }
    match op {
        CollectiveOp::AllReduce => 2 * (n - 1),
        CollectiveOp::AllGather | CollectiveOp::ReduceScatter | CollectiveOp::AllToAll => n - 1,
        CollectiveOp::Broadcast { .. } | CollectiveOp::Reduce { .. } => 1,
    }
}

/// The transfers of step `k` (0-based) of `op` over `group` (ring order), written to `out`
/// (cleared first). Returns how their latencies combine. A broadcast or reduce whose root is not
/// in the group is rooted at the group's first device (the graph check rejects such graphs
/// before they get here).
pub fn step(
    op: CollectiveOp,
    group: &[DeviceId],
    bytes: u64,
    k: u32,
    out: &mut Vec<Transfer>,
) -> StepLatency {
    out.clear();
    let n = group.len();
    if n <= 1 {
        return StepLatency::Parallel;
    }
    let share = bytes as f64 / n as f64;
    let at = |i: usize| group[i % n];
    match op {
        CollectiveOp::AllReduce | CollectiveOp::AllGather | CollectiveOp::ReduceScatter => {
            for i in 0..n {
                out.push(Transfer {
                    src: at(i),
                    dst: at(i + 1),
                    bytes: share,
                });
            }
            StepLatency::Parallel
        }
        CollectiveOp::AllToAll => {
            let d = k as usize + 1;
            for i in 0..n {
                out.push(Transfer {
                    src: at(i),
                    dst: at(i + d),
                    bytes: share,
                });
            }
            StepLatency::Parallel
        }
        CollectiveOp::Broadcast { root } | CollectiveOp::Reduce { root } => {
            let r = group.iter().position(|&d| d == root).unwrap_or(0);
            let first = match op {
                CollectiveOp::Broadcast { .. } => r,
                _ => r + 1,
            };
            for h in 0..n - 1 {
                out.push(Transfer {
                    src: at(first + h),
                    dst: at(first + h + 1),
                    bytes: bytes as f64,
                });
            }
            StepLatency::Chain
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Hardware;
    use crate::schedule::{Label, Pass, Stream, TaskGraph, Work};
    use crate::sim::{simulate, LinkModel, SimOptions};

    const LABEL: Label = Label {
        pass: Pass::Fwd,
        layer: None,
        block: "mlp",
        name: "collective",
        outer: None,
        step: None,
        micro_batch: 0,
    };

    #[test]
    fn step_counts_and_shapes() {
        assert_eq!(steps(CollectiveOp::AllReduce, 8), 14);
        assert_eq!(steps(CollectiveOp::AllGather, 8), 7);
        assert_eq!(steps(CollectiveOp::AllToAll, 4), 3);
        assert_eq!(steps(CollectiveOp::Broadcast { root: 0 }, 4), 1);
        assert_eq!(steps(CollectiveOp::AllReduce, 1), 0);
        let mut out = Vec::new();
        // All-to-all step k=1 (second step): rank i sends to i+2.
        step(CollectiveOp::AllToAll, &[10, 11, 12, 13], 400, 1, &mut out);
        let pairs: Vec<_> = out.iter().map(|t| (t.src, t.dst, t.bytes)).collect();
        assert_eq!(
            pairs,
            [
                (10, 12, 100.0),
                (11, 13, 100.0),
                (12, 10, 100.0),
                (13, 11, 100.0)
            ]
        );
        // Reduce to root 12 over [10, 11, 12, 13]: chain 13 -> 10 -> 11 -> 12, full size.
        let lat = step(
            CollectiveOp::Reduce { root: 12 },
            &[10, 11, 12, 13],
            400,
            0,
            &mut out,
        );
        assert_eq!(lat, StepLatency::Chain);
        let pairs: Vec<_> = out.iter().map(|t| (t.src, t.dst, t.bytes)).collect();
        assert_eq!(pairs, [(13, 10, 400.0), (10, 11, 400.0), (11, 12, 400.0)]);
    }

    fn hw() -> Hardware {
        crate::sim::test_hardware()
    }

    /// Simulated time of one collective on devices 0..n, all ranks starting at 0.
    fn run(hw: &Hardware, op: CollectiveOp, n: u32, bytes: u64, model: LinkModel) -> u64 {
        let mut g = TaskGraph::new(n);
        let group: Vec<u32> = (0..n).collect();
        for d in 0..n {
            g.add(
                d,
                Stream::Comm(0),
                Work::Collective {
                    op,
                    id: 1,
                    group: group.clone(),
                    bytes,
                },
                vec![],
                LABEL,
            );
        }
        let r = simulate(&g, hw, model, SimOptions::default()).unwrap();
        r.makespan_ps
    }

    fn assert_close_ps(got: u64, want_s: f64, slack_ps: u64) {
        let want = (want_s * 1e12).round() as u64;
        assert!(
            got.abs_diff(want) <= slack_ps,
            "got {got} ps, closed form {want} ps"
        );
    }

    #[test]
    fn ring_all_reduce_matches_closed_form() {
        // 2(n-1)(α + M/(nB)), n = 8, M = 1 GiB, α = 3 µs, B = 230 GB/s. Each step is rounded
        // once for α and once (up) for the transfer: at most 1 ps per step each.
        let hw = hw();
        let (n, m) = (8u32, 1u64 << 30);
        let (a, b) = (3e-6, 230e9);
        let want = 2.0 * (n as f64 - 1.0) * (a + m as f64 / (n as f64 * b));
        for model in [LinkModel::Ideal, LinkModel::MaxMin] {
            let got = run(&hw, CollectiveOp::AllReduce, n, m, model);
            assert_close_ps(got, want, 2 * 14);
        }
    }

    #[test]
    fn all_gather_reduce_scatter_and_all_to_all_match_closed_forms() {
        // (n-1)(α + M/(nB)) for all three (pairwise all-to-all), n = 4, M = 64 MiB.
        let hw = hw();
        let (n, m) = (4u32, 64u64 << 20);
        let want = (n as f64 - 1.0) * (3e-6 + m as f64 / (n as f64 * 230e9));
        for op in [
            CollectiveOp::AllGather,
            CollectiveOp::ReduceScatter,
            CollectiveOp::AllToAll,
        ] {
            for model in [LinkModel::Ideal, LinkModel::MaxMin] {
                assert_close_ps(run(&hw, op, n, m, model), want, 2 * 3);
            }
        }
    }

    #[test]
    fn broadcast_and_reduce_are_pipelined_chains() {
        // (n-1)α + M/B: every port carries one hop of the chain, so max-min sharing changes
        // nothing. n = 4, M = 64 MiB.
        let hw = hw();
        let (n, m) = (4u32, 64u64 << 20);
        let want = 3.0 * 3e-6 + m as f64 / 230e9;
        for op in [
            CollectiveOp::Broadcast { root: 2 },
            CollectiveOp::Reduce { root: 1 },
        ] {
            for model in [LinkModel::Ideal, LinkModel::MaxMin] {
                assert_close_ps(run(&hw, op, n, m, model), want, 4);
            }
        }
    }

    #[test]
    fn all_reduce_across_nodes_is_bound_by_the_nic_steps() {
        // 16 ranks on 2 nodes, ring 0..15: in each step 14 hops stay inside a node and 2 cross
        // (7 -> 8 and 15 -> 0), so each step costs max(α_intra + M/(nB_nvl),
        // α_ib + M/(nB_ib)) = 14 µs + M/(16 · 24 GB/s) (derived: both the α and the transfer
        // of the NIC hop dominate). 30 steps.
        let hw = hw();
        let (n, m) = (16u32, 256u64 << 20);
        let want = 30.0 * (14e-6 + m as f64 / (16.0 * 24e9));
        for model in [LinkModel::Ideal, LinkModel::MaxMin] {
            assert_close_ps(run(&hw, CollectiveOp::AllReduce, n, m, model), want, 60);
        }
    }
}
