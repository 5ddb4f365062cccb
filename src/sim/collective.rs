//! Collectives as the steps NCCL/RCCL run, so their traffic shares links with point-to-point
//! flows. The algorithm (ring, tree or direct) is the profile's choice for the operation, the
//! group's scope and the buffer size ([`super::Network::algorithm`], the same table the cost
//! model reads); `cost::collective` states every algorithm's steps and closed form.
//!
//! A collective over a group of `n` devices (in the group's ring order) is a sequence of
//! *steps*. A step costs a latency, then starts all its transfers together; it ends when the
//! last of them has arrived, and the next step starts. `bytes` is the buffer size as nccl-tests
//! defines it (see [`crate::schedule::Work::Collective`]). With `M = bytes`:
//!
//! | algorithm | op | steps | each step |
//! |---|---|---|---|
//! | ring | all-reduce | `2(n-1)` (reduce-scatter then all-gather) | every rank sends `M/n` to its ring successor |
//! | ring | reduce-scatter, all-gather | `n-1` | every rank sends `M/n` to its ring successor |
//! | ring | all-to-all | `n-1`; step `k = 1..n-1` | rank `i` sends `M/n` to rank `i+k` (pairwise exchange) |
//! | ring | broadcast, reduce | 1 | a pipelined chain of `n-1` hops, each moving `M` |
//! | direct | reduce-scatter, all-gather, all-to-all | 1 | every rank sends `M/n` to every other rank |
//! | direct | all-reduce | 2 | the same, twice |
//! | direct | broadcast / reduce | 1 | the root sends `M` to every other rank / every other rank sends `M` to the root |
//! | tree | broadcast | `⌈log2 n⌉`; step `k` | rank `r < 2^k` (counted from the root) sends `M` to `r + 2^k` |
//! | tree | reduce | `⌈log2 n⌉`; step `k` | rank `r` with `r mod 2^(k+1) = 2^k` sends `M` to `r − 2^k` |
//! | tree | all-reduce | `2⌈log2 n⌉` | a reduce to the group's first rank, then a broadcast from it |
//!
//! Latency of a step: the point-to-point α ([`super::Network::latency_ps`]: the profile's
//! `intra_node.p2p_latency_s` or `inter_node.latency_s`) of the slowest hop in the step, since
//! the hops of a step run in parallel. This is NCCL's per-step `hwLat` (tuning.cc: Simple
//! protocol, NVLink 3.4 µs, NET 14 µs per step, hardware.md §7.3); NCCL's one-off `baseLat`
//! (≈8 µs) is not charged, and the profile's `collective_latency_s` (a whole small all-reduce)
//! is not used. So with ideal links an `n`-rank ring all-reduce takes `2(n-1)(α + M/(nB))`, the
//! ring formula of Thakur et al. (hardware.md §7.2).
//!
//! Ring all-to-all is modelled as `n-1` pairwise steps rather than all pairs at once: it matches
//! the `(n-1)α + (n-1)/n · M/B` closed form, and each step loads every egress and ingress port
//! once, like a ring step; direct all-to-all sends to every peer at once.
//!
//! Ring broadcast and reduce are a chain pipelined in infinitely many chunks (NCCL pipelines
//! the chain in small slices): broadcast runs `root -> root+1 -> … -> root-1`, reduce runs
//! `root+1 -> … -> root`. All `n-1` hops are in flight at once, each carrying `M`, after a
//! latency equal to the sum of the hops' α (the time the first slice needs to reach the end of
//! the chain). With ideal links: `(n-1)α + M/B`.

use crate::config::Algorithm;
use crate::cost::collective as closed;
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

/// Number of steps of `op` over `n` ranks with `algorithm`.
pub fn steps(algorithm: Algorithm, op: CollectiveOp, n: usize) -> u32 {
    closed::steps(algorithm, op, n as u64) as u32
}

/// The transfers of step `k` (0-based) of `op` over `group` (ring order) with `algorithm`,
/// written to `out` (cleared first). Returns how their latencies combine. A broadcast or
/// reduce whose root is not in the group is rooted at the group's first device (the graph check
/// rejects such graphs before they get here).
pub fn step(
    algorithm: Algorithm,
    op: CollectiveOp,
    group: &[DeviceId],
    bytes: u64,
    k: u32,
    out: &mut Vec<Transfer>,
) -> StepLatency {
    step_from(algorithm, op, group, bytes, k, None, out)
}

/// [`step`], keeping of a ring step's parallel transfers only those sent from the group
/// positions `senders` (ascending) when given: a folded simulation moves only its canonical
/// ranks' transfers, and listing them directly keeps a step's cost to the distinct ranks
/// rather than the group's size (a gradient ring over 1,000 replicas). Other steps are
/// written whole; the caller filters them.
pub fn step_from(
    algorithm: Algorithm,
    op: CollectiveOp,
    group: &[DeviceId],
    bytes: u64,
    k: u32,
    senders: Option<&[u32]>,
    out: &mut Vec<Transfer>,
) -> StepLatency {
    out.clear();
    let n = group.len();
    if n <= 1 {
        return StepLatency::Parallel;
    }
    let share = bytes as f64 / n as f64;
    let at = |i: usize| group[i % n];
    let root = match op {
        CollectiveOp::Broadcast { root } | CollectiveOp::Reduce { root } => {
            group.iter().position(|&d| d == root).unwrap_or(0)
        }
        _ => 0,
    };
    let mut push = |src: usize, dst: usize, bytes: f64| {
        out.push(Transfer {
            src: at(src),
            dst: at(dst),
            bytes,
        })
    };
    match (closed::effective(algorithm, op), op) {
        (
            Algorithm::Ring,
            CollectiveOp::AllReduce | CollectiveOp::AllGather | CollectiveOp::ReduceScatter,
        ) => {
            match senders {
                Some(from) => from
                    .iter()
                    .for_each(|&i| push(i as usize, i as usize + 1, share)),
                None => (0..n).for_each(|i| push(i, i + 1, share)),
            }
            StepLatency::Parallel
        }
        (Algorithm::Ring, CollectiveOp::AllToAll) => {
            let d = k as usize + 1;
            match senders {
                Some(from) => from
                    .iter()
                    .for_each(|&i| push(i as usize, i as usize + d, share)),
                None => (0..n).for_each(|i| push(i, i + d, share)),
            }
            StepLatency::Parallel
        }
        (Algorithm::Ring, CollectiveOp::Broadcast { .. } | CollectiveOp::Reduce { .. }) => {
            let first = match op {
                CollectiveOp::Broadcast { .. } => root,
                _ => root + 1,
            };
            for h in 0..n - 1 {
                push(first + h, first + h + 1, bytes as f64);
            }
            StepLatency::Chain
        }
        (Algorithm::Direct, CollectiveOp::Broadcast { .. }) => {
            for j in 1..n {
                push(root, root + j, bytes as f64);
            }
            StepLatency::Parallel
        }
        (Algorithm::Direct, CollectiveOp::Reduce { .. }) => {
            for j in 1..n {
                push(root + j, root, bytes as f64);
            }
            StepLatency::Parallel
        }
        (Algorithm::Direct, _) => {
            for i in 0..n {
                for j in 1..n {
                    push(i, i + j, share);
                }
            }
            StepLatency::Parallel
        }
        (Algorithm::Tree, _) => {
            // All-reduce: a reduce to rank 0 (steps 0..L), then a broadcast from it.
            let levels = closed::log2_ceil(n as u64) as u32;
            let (reduce, level) = match op {
                CollectiveOp::Reduce { .. } => (true, k),
                CollectiveOp::AllReduce if k < levels => (true, k),
                CollectiveOp::AllReduce => (false, k - levels),
                _ => (false, k),
            };
            let base = if matches!(op, CollectiveOp::AllReduce) {
                0
            } else {
                root
            };
            let half = 1usize << level;
            for r in 0..n {
                if reduce {
                    if r % (2 * half) == half {
                        push(base + r, base + r - half, bytes as f64);
                    }
                } else if r < half && r + half < n {
                    push(base + r, base + r + half, bytes as f64);
                }
            }
            StepLatency::Parallel
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
        assert_eq!(steps(Algorithm::Ring, CollectiveOp::AllReduce, 8), 14);
        assert_eq!(steps(Algorithm::Ring, CollectiveOp::AllGather, 8), 7);
        assert_eq!(steps(Algorithm::Ring, CollectiveOp::AllToAll, 4), 3);
        assert_eq!(
            steps(Algorithm::Ring, CollectiveOp::Broadcast { root: 0 }, 4),
            1
        );
        assert_eq!(steps(Algorithm::Ring, CollectiveOp::AllReduce, 1), 0);
        let mut out = Vec::new();
        // All-to-all step k=1 (second step): rank i sends to i+2.
        step(
            Algorithm::Ring,
            CollectiveOp::AllToAll,
            &[10, 11, 12, 13],
            400,
            1,
            &mut out,
        );
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
            Algorithm::Ring,
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

    /// The switch of `test_hardware` (230 GB/s per port and direction, α = 3 µs) with 4 GPUs
    /// per node, or a 4-GPU full mesh: 50 GB/s per pair link, the port driving all three
    /// links at once (150 GB/s), the same α. `rules` set the algorithm table.
    fn fabric(mesh: bool, rules: Vec<crate::config::CollectiveRule>) -> Hardware {
        let mut hw = crate::sim::test_hardware();
        hw.gpus_per_node = 4;
        if mesh {
            hw.intra_node.kind = crate::config::IntraNodeKind::Mesh;
            hw.intra_node.bytes_per_s_per_direction.value = 150e9;
            hw.intra_node.link_bytes_per_s_per_direction = Some(crate::config::Figure {
                value: 50e9,
                source: "test".into(),
            });
        }
        hw.collectives = rules;
        hw
    }

    fn every(a: Algorithm) -> Vec<crate::config::CollectiveRule> {
        vec![crate::config::CollectiveRule {
            op: crate::config::CollectiveKind::Any,
            scope: crate::config::Scope::Any,
            max_bytes: None,
            algorithm: a,
            source: "test".into(),
        }]
    }

    /// Ring, all-to-all and broadcast on a 4-GPU full mesh and on a switch, each time derived
    /// by hand (M = 120 MB, α = 3 µs), simulated with both link models, and the analytic
    /// closed form (cost::collective) beside it.
    #[test]
    fn hand_derived_times_on_a_four_gpu_mesh_and_a_switch() {
        let m = 120_000_000u64;
        let (a, l, b) = (3e-6, 50e9, 230e9);
        let q = m as f64 / 4.0; // one rank's share, 30 MB
        let bc = CollectiveOp::Broadcast { root: 1 };
        let ag = CollectiveOp::AllGather;
        let a2a = CollectiveOp::AllToAll;
        // (mesh?, algorithm, op, ideal-link time, max-min time)
        let cases: Vec<(bool, Algorithm, CollectiveOp, f64, f64)> = vec![
            // Mesh. A ring step's hops each use their own 50 GB/s link: 3 × (α + q/L).
            (
                true,
                Algorithm::Ring,
                ag,
                3.0 * (a + q / l),
                3.0 * (a + q / l),
            ),
            // Pairwise all-to-all: the same three steps, each pair on its own link.
            (
                true,
                Algorithm::Ring,
                a2a,
                3.0 * (a + q / l),
                3.0 * (a + q / l),
            ),
            // Direct all-to-all: all three links at once, one step: α + q/L (the port carries
            // 3 × 50 = 150 GB/s, exactly its capacity).
            (true, Algorithm::Direct, a2a, a + q / l, a + q / l),
            (true, Algorithm::Direct, ag, a + q / l, a + q / l),
            // Broadcast: the ring is a chain, 3α + M/L; direct sends M on the root's three
            // links at once, α + M/L; a binomial tree takes 2 steps of α + M/L.
            (
                true,
                Algorithm::Ring,
                bc,
                3.0 * a + m as f64 / l,
                3.0 * a + m as f64 / l,
            ),
            (
                true,
                Algorithm::Direct,
                bc,
                a + m as f64 / l,
                a + m as f64 / l,
            ),
            (
                true,
                Algorithm::Tree,
                bc,
                2.0 * (a + m as f64 / l),
                2.0 * (a + m as f64 / l),
            ),
            // Switch. Ring all-gather: 3 × (α + q/B).
            (
                false,
                Algorithm::Ring,
                ag,
                3.0 * (a + q / b),
                3.0 * (a + q / b),
            ),
            (
                false,
                Algorithm::Ring,
                a2a,
                3.0 * (a + q / b),
                3.0 * (a + q / b),
            ),
            // Direct all-to-all through a switch: each port carries three chunks at once. With
            // ideal links every flow still gets the whole port (α + q/B, optimistic); max-min
            // shares it: α + 3q/B — the ring's bandwidth term with one α.
            (false, Algorithm::Direct, a2a, a + q / b, a + 3.0 * q / b),
            // Broadcast through a switch: chain 3α + M/B; direct, the root's port carries
            // three copies (max-min: α + 3M/B); tree 2(α + M/B).
            (
                false,
                Algorithm::Ring,
                bc,
                3.0 * a + m as f64 / b,
                3.0 * a + m as f64 / b,
            ),
            (
                false,
                Algorithm::Direct,
                bc,
                a + m as f64 / b,
                a + 3.0 * m as f64 / b,
            ),
            (
                false,
                Algorithm::Tree,
                bc,
                2.0 * (a + m as f64 / b),
                2.0 * (a + m as f64 / b),
            ),
        ];
        for (mesh, alg, op, ideal, maxmin) in cases {
            let hw = fabric(mesh, every(alg));
            let what = format!("{} {alg:?} {op:?}", if mesh { "mesh" } else { "switch" });
            // Each step rounds α and the transfer once each (≤ 1 ps).
            assert_close_ps(run(&hw, op, 4, m, LinkModel::Ideal), ideal, 8);
            assert_close_ps(run(&hw, op, 4, m, LinkModel::MaxMin), maxmin, 8);
            // The analytic twin prices a step at its busiest link: the max-min time.
            let cost = crate::cost::CostModel::new(&hw);
            let closed = cost.collective_s(op, &[0, 1, 2, 3], m);
            assert!(
                (closed - maxmin).abs() < 1e-12,
                "{what}: closed form {closed} vs {maxmin}"
            );
        }
    }

    /// Point-to-point rings (METP's traffic): on a mesh two messages to the same neighbour
    /// share their pair's link while messages to two different peers do not; through a switch
    /// both share the sender's port.
    #[test]
    fn point_to_point_on_a_mesh_uses_the_pair_link() {
        let m = 100_000_000u64;
        for (mesh, same_peer, want) in [
            // Mesh: 0→1 twice: the 50 GB/s link shared, 2M/L.
            (true, true, 3e-6 + 2.0 * m as f64 / 50e9),
            // Mesh: 0→1 and 0→2: two links, M/L each (the 150 GB/s port is not reached).
            (true, false, 3e-6 + m as f64 / 50e9),
            // Switch: either way gpu0's 230 GB/s egress is shared: 2M/B.
            (false, true, 3e-6 + 2.0 * m as f64 / 230e9),
            (false, false, 3e-6 + 2.0 * m as f64 / 230e9),
        ] {
            let hw = fabric(mesh, Vec::new());
            let mut g = TaskGraph::new(4);
            for (tag, to) in [(0u64, 1u32), (1, if same_peer { 1 } else { 2 })] {
                g.add(
                    0,
                    Stream::Comm(tag as u8),
                    Work::Send { to, bytes: m, tag },
                    vec![],
                    LABEL,
                );
                g.add(
                    to,
                    Stream::Comm(tag as u8),
                    Work::Recv {
                        from: 0,
                        bytes: m,
                        tag,
                    },
                    vec![],
                    LABEL,
                );
            }
            let r = simulate(&g, &hw, LinkModel::MaxMin, SimOptions::default()).unwrap();
            assert_close_ps(r.makespan_ps, want, 4);
        }
    }
}
