use crate::config::Algorithm;
use crate::config::{CollectiveKind, CollectiveRule, Figure, Hardware, IntraNodeKind, Scope};
use crate::cost::CostModel;
use crate::schedule::{CollectiveOp, Label, Pass, Stream, TaskGraph, Work};
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

/// Simulated time of one collective on `group`, every rank starting at 0.
fn run(hw: &Hardware, op: CollectiveOp, group: &[u32], bytes: u64, model: LinkModel) -> u64 {
    let devices = group.iter().copied().max().map_or(1, |m| m + 1);
    let mut g = TaskGraph::new(devices);
    for &d in group {
        g.add(
            d,
            Stream::Comm(0),
            Work::Collective {
                op,
                id: 1,
                group: group.to_vec(),
                bytes,
            },
            vec![],
            LABEL,
        );
    }
    simulate(&g, hw, model, SimOptions::default())
        .unwrap()
        .makespan_ps
}

fn close_ps(got: u64, want_s: f64, slack_ps: u64) {
    let want = (want_s * 1e12).round() as u64;
    assert!(
        got.abs_diff(want) <= slack_ps,
        "got {got} ps, expected {want} ps"
    );
}

fn range(n: u32) -> Vec<u32> {
    (0..n).collect()
}

#[test]
fn ring_all_reduce_matches_the_ring_formula() {
    // The test profile has no collective_library: one protocol whose step latency is the
    // point-to-point α (3 µs), at the port's 230 GB/s: 2(n−1)(α + M/(nB)), n = 8, M = 1 GiB.
    // Each step rounds α and the transfer once each (≤ 1 ps).
    let hw = crate::sim::test_hardware();
    let (n, m) = (8u32, 1u64 << 30);
    let want = 2.0 * (n as f64 - 1.0) * (3e-6 + m as f64 / (n as f64 * 230e9));
    for model in [LinkModel::Ideal, LinkModel::MaxMin] {
        close_ps(
            run(&hw, CollectiveOp::AllReduce, &range(n), m, model),
            want,
            2 * 14,
        );
    }
}

#[test]
fn a_ring_across_nodes_spreads_its_crossing_over_the_rails() {
    // 16 ranks on 2 nodes of 8, 8 HDR rails of 24 GB/s: in each step a node's GPUs each send
    // M/16 over NVLink (230 GB/s) and the node's crossing, M/16, goes over its 8 rails, M/128
    // each: 8 × 24 = 192 GB/s, so M/(16 · 192e9) per step — not one NIC's M/(16 · 24e9). The
    // latency is NCCL's: 28 steps inside nodes at α = 3 µs and 2 crossing at 14 µs.
    let hw = crate::sim::test_hardware();
    let m = 256u64 << 20;
    let want = 28.0 * 3e-6 + 2.0 * 14e-6 + 30.0 * m as f64 / (16.0 * 192e9);
    for model in [LinkModel::Ideal, LinkModel::MaxMin] {
        close_ps(
            run(&hw, CollectiveOp::AllReduce, &range(16), m, model),
            want,
            60,
        );
    }
    // With 2 NICs per node the crossing is NIC-bound: M/16 over 2 × 24 GB/s per step.
    let mut two = hw.clone();
    two.inter_node.nics_per_node = 2;
    let want = 28.0 * 3e-6 + 2.0 * 14e-6 + 30.0 * m as f64 / 16.0 / (2.0 * 24e9);
    close_ps(
        run(
            &two,
            CollectiveOp::AllReduce,
            &range(16),
            m,
            LinkModel::MaxMin,
        ),
        want,
        60,
    );
}

/// A 4-GPU node behind a switch (230 GB/s per port and direction, α = 3 µs), or a 4-GPU full
/// mesh (50 GB/s per pair link, the port driving all three at once: 150 GB/s); `rules` enable
/// algorithms beside the ring.
fn fabric(mesh: bool, rules: Vec<CollectiveRule>) -> Hardware {
    let mut hw = crate::sim::test_hardware();
    hw.gpus_per_node = 4;
    if mesh {
        hw.intra_node.kind = IntraNodeKind::Mesh;
        hw.intra_node.bytes_per_s_per_direction.value = 150e9;
        hw.intra_node.link_bytes_per_s_per_direction = Some(Figure {
            value: 50e9,
            source: "test".into(),
        });
    }
    hw.collectives = rules;
    hw
}

fn only(a: Algorithm) -> Vec<CollectiveRule> {
    vec![CollectiveRule {
        op: CollectiveKind::Any,
        scope: Scope::Any,
        max_bytes: None,
        algorithm: a,
        source: "test".into(),
    }]
}

/// Hand-derived times on a 4-GPU mesh and switch (M = 120 MB, α = 3 µs): the algorithm the
/// library picks, its time simulated under both link models, and the cost model's.
#[test]
fn hand_derived_times_on_a_four_gpu_mesh_and_a_switch() {
    let m = 120_000_000u64;
    let (a, l, b) = (3e-6, 50e9, 230e9);
    let q = m as f64 / 4.0;
    let bc = CollectiveOp::Broadcast { root: 1 };
    let ag = CollectiveOp::AllGather;
    let a2a = CollectiveOp::AllToAll;
    // (mesh?, rules, op, algorithm picked, time)
    let cases: Vec<(bool, Vec<CollectiveRule>, CollectiveOp, Algorithm, f64)> = vec![
        // Mesh, ring only: a ring hop gets its one 50 GB/s link: 3 × (α + q/L).
        (true, vec![], ag, Algorithm::Ring, 3.0 * (a + q / l)),
        // All-to-all always may go direct: all three links at once, α + q/L.
        (true, vec![], a2a, Algorithm::Direct, a + q / l),
        (
            true,
            only(Algorithm::Direct),
            ag,
            Algorithm::Direct,
            a + q / l,
        ),
        // Broadcast on the mesh: direct sends M on the root's three links at once.
        (
            true,
            only(Algorithm::Direct),
            bc,
            Algorithm::Direct,
            a + m as f64 / l,
        ),
        // The ring chain: 3α + M/L; a binomial tree 2(α + M/L): the chain wins.
        (
            true,
            only(Algorithm::Tree),
            bc,
            Algorithm::Ring,
            3.0 * a + m as f64 / l,
        ),
        // Switch: ring all-gather 3 × (α + q/B); direct moves the same bytes through each port
        // (3q at B) with one α: the library picks it.
        (false, vec![], ag, Algorithm::Ring, 3.0 * (a + q / b)),
        (
            false,
            only(Algorithm::Direct),
            ag,
            Algorithm::Direct,
            a + 3.0 * q / b,
        ),
        (false, vec![], a2a, Algorithm::Direct, a + 3.0 * q / b),
        // Broadcast through a switch: chain 3α + M/B beats direct's α + 3M/B.
        (
            false,
            only(Algorithm::Direct),
            bc,
            Algorithm::Ring,
            3.0 * a + m as f64 / b,
        ),
    ];
    for (mesh, rules, op, alg, want) in cases {
        let hw = fabric(mesh, rules);
        let group = range(4);
        let cost = CostModel::new(&hw);
        let plan = cost.collective_plan(op, &group, m);
        let what = format!("{} {op:?}", if mesh { "mesh" } else { "switch" });
        assert_eq!(plan.algorithm, alg, "{what}");
        assert!(
            (plan.time_s - want).abs() < 1e-12,
            "{what}: {} vs {want}",
            plan.time_s
        );
        for model in [LinkModel::Ideal, LinkModel::MaxMin] {
            close_ps(run(&hw, op, &group, m, model), want, 8);
        }
    }
}

/// Point-to-point rings (METP's traffic): on a mesh two messages to the same neighbour share
/// their pair's link while messages to two different peers do not; through a switch both share
/// the sender's port.
#[test]
fn point_to_point_on_a_mesh_uses_the_pair_link() {
    let m = 100_000_000u64;
    for (mesh, same_peer, want) in [
        (true, true, 3e-6 + 2.0 * m as f64 / 50e9),
        (true, false, 3e-6 + m as f64 / 50e9),
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
        close_ps(r.makespan_ps, want, 4);
    }
}

/// Every plan the bundled profiles' libraries pick — NVLS on the NVSwitch nodes, direct on the
/// xGMI mesh, rings across nodes — simulates to the cost model's time under both link models.
/// One collective alone, under either link model, takes its plan's time (within 1e-6).
fn simulates_to_plan_time(hw: &Hardware, op: CollectiveOp, group: &[u32], m: u64, what: &str) {
    let plan = CostModel::new(hw).collective_plan(op, group, m);
    for model in [LinkModel::Ideal, LinkModel::MaxMin] {
        let got = run(hw, op, group, m, model);
        let rel = (got as f64 * 1e-12 / plan.time_s - 1.0).abs();
        assert!(
            rel < 1e-6,
            "{what} {op:?} n={} {m} B {model:?}: simulated {got} ps, plan {} s ({:?} {:?})",
            group.len(),
            plan.time_s,
            plan.algorithm,
            plan.protocol
        );
    }
}

#[test]
fn bundled_profiles_simulate_to_their_plan_times() {
    for name in ["dgx-h100", "b200-8", "mi300x-8", "dgx-a100-80gb"] {
        let mut hw = crate::config::load_hardware(name).unwrap();
        hw.nodes = 2;
        for (group, op, m) in [
            (range(8), CollectiveOp::AllReduce, 1u64 << 30),
            (range(8), CollectiveOp::AllReduce, 1 << 12),
            (range(16), CollectiveOp::AllReduce, 1 << 30),
            (range(8), CollectiveOp::AllGather, 1 << 28),
            (range(16), CollectiveOp::AllToAll, 1 << 28),
        ] {
            simulates_to_plan_time(&hw, op, &group, m, name);
        }
    }
}

/// A ring over 64 replicas (one GPU of each of 64 nodes) runs as at most
/// [`crate::sim::network::COLLECTIVE_STEPS`] steps a phase, each carrying several steps'
/// bytes after as many latencies: the steps' bytes and latencies add up to the library's plan,
/// a phase of varying steps (all-to-all's shifts) is left step by step, and uncontended the
/// simulation still takes exactly the plan's time.
#[test]
fn rings_over_many_replicas_run_coalesced_in_the_plan_time() {
    let mut hw = crate::config::load_hardware("dgx-h100").unwrap();
    hw.nodes = 64;
    let cost = CostModel::new(&hw);
    let group: Vec<u32> = (0..64).map(|n| n * 8).collect();
    let cap = crate::sim::network::COLLECTIVE_STEPS;
    let totals = |p: &crate::cost::Plan| {
        let (mut bytes, mut lat) = (0.0, 0.0);
        for ph in &p.phases {
            let b = match ph.pattern {
                crate::cost::pattern::Pattern::Ring { bytes } => bytes,
                _ => 0.0,
            };
            bytes += f64::from(ph.steps) * b;
            lat += f64::from(ph.steps) * ph.step_latency_s;
        }
        (bytes, lat)
    };
    for op in [
        CollectiveOp::AllGather,
        CollectiveOp::ReduceScatter,
        CollectiveOp::AllReduce,
    ] {
        let m = 1u64 << 30;
        let plan = cost.collective_plan(op, &group, m);
        assert!(
            plan.phases.iter().any(|p| p.steps > cap),
            "{op:?}: {plan:?}"
        );
        let short = plan.coalesced(cap);
        let (b0, l0) = totals(&plan);
        let (b1, l1) = totals(&short);
        assert!((b1 / b0 - 1.0).abs() < 1e-12 && (l1 / l0 - 1.0).abs() < 1e-12);
        // Each phase of the plan becomes at most `cap` steps.
        assert!(
            short.phases.iter().all(|p| p.steps <= cap),
            "{op:?}: {short:?}"
        );
        assert!(short.steps() <= cap * plan.phases.len() as u32);
        assert!(short.steps() < plan.steps());
        simulates_to_plan_time(&hw, op, &group, m, "64 nodes");
    }
    // Shifts differ step by step (each step a different peer): kept.
    let mut shifts = cost.collective_plan(CollectiveOp::AllGather, &group, 1 << 20);
    shifts.phases = vec![crate::cost::collective::Phase {
        steps: 63,
        step_latency_s: 1e-6,
        pattern: crate::cost::pattern::Pattern::Shift {
            intra: 1.0,
            inter: 2.0,
        },
    }];
    assert_eq!(shifts.coalesced(cap), shifts);
}
