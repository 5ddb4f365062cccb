//! The engine on small graphs whose timings follow from α + bytes / B and the cost model.

use super::*;
use crate::schedule::{KernelShape, Label, Pass, TaskId};

fn label(name: &'static str) -> Label {
    Label {
        pass: Pass::Fwd,
        layer: Some(0),
        block: "attention",
        name,
        outer: None,
        step: None,
        micro_batch: 0,
    }
}

fn hw() -> Hardware {
    crate::sim::test_hardware()
}

fn hw_no_slowdown() -> Hardware {
    let mut h = hw();
    h.overlap_compute_slowdown_fraction.value = 0.0;
    h
}

/// An element-wise kernel moving `bytes`, as kernel 0 of a graph's table (see
/// [`with_kernel`]), and its duration in ps on `hw`.
fn kernel(hw: &Hardware, bytes: f64) -> (Work, SimTime) {
    let shape = KernelShape::Elementwise {
        bytes: bytes as u64,
    };
    let ps = secs_to_ps(CostModel::new(hw).kernel_s(&shape));
    (Work::Compute { kernel: 0 }, ps)
}

/// A graph over `devices` whose kernel 0 is [`kernel`]'s `bytes`.
fn with_kernel(devices: u32, bytes: f64) -> TaskGraph {
    let mut g = TaskGraph::new(devices);
    g.add_kernel(KernelShape::Elementwise {
        bytes: bytes as u64,
    });
    g
}

fn send(to: u32, bytes: u64, tag: u64) -> Work {
    Work::Send { to, bytes, tag }
}

fn recv(from: u32, bytes: u64, tag: u64) -> Work {
    Work::Recv { from, bytes, tag }
}

/// Transfer time of `bytes` at `bw`, rounded up to the ps as the engine does.
fn xfer_ps(bytes: f64, bw: f64) -> SimTime {
    (bytes / bw * 1e12).ceil() as SimTime
}

fn sim(g: &TaskGraph, hw: &Hardware, model: LinkModel) -> SimResult {
    simulate(g, hw, model, SimOptions::default()).unwrap()
}

#[test]
fn empty_graph_takes_no_time() {
    let r = sim(&TaskGraph::new(2), &hw(), LinkModel::MaxMin);
    assert_eq!(r.makespan_ps, 0);
    assert_eq!(r.devices.len(), 2);
    assert_eq!(r.tasks, 0);
}

#[test]
fn send_recv_takes_alpha_plus_bytes_over_bandwidth() {
    // Intra-node: α = 3 µs, B = 230 GB/s; 1e9 bytes -> 3 µs + 4.347826087 ms.
    let hw = hw();
    let mut g = TaskGraph::new(2);
    g.add(
        0,
        Stream::Comm(0),
        send(1, 1_000_000_000, 7),
        vec![],
        label("s"),
    );
    g.add(
        1,
        Stream::Comm(0),
        recv(0, 1_000_000_000, 7),
        vec![],
        label("r"),
    );
    for model in [LinkModel::Ideal, LinkModel::MaxMin] {
        let r = sim(&g, &hw, model);
        assert_eq!(r.makespan_ps, 3_000_000 + 4_347_826_087);
        assert_eq!(r.devices[0].comm_busy_s, r.step_time_s);
        assert_eq!(r.devices[0].exposed_comm_s, r.step_time_s);
    }
    // Inter-node, 16 devices on 2 nodes: α = 14 µs, B = 24 GB/s per NIC.
    let mut g = TaskGraph::new(16);
    g.add(
        3,
        Stream::Comm(0),
        send(11, 1_000_000_000, 0),
        vec![],
        label("s"),
    );
    g.add(
        11,
        Stream::Comm(0),
        recv(3, 1_000_000_000, 0),
        vec![],
        label("r"),
    );
    let r = sim(&g, &hw, LinkModel::MaxMin);
    assert_eq!(r.makespan_ps, 14_000_000 + xfer_ps(1e9, 24e9));
}

#[test]
fn transfer_begins_at_rendezvous() {
    // The recv is posted after a kernel of c on device 1: the message starts at c.
    let hw = hw_no_slowdown();
    let (k, c) = kernel(&hw, 1e9);
    let mut g = with_kernel(2, 1e9);
    g.add(
        0,
        Stream::Comm(0),
        send(1, 230_000_000, 0),
        vec![],
        label("s"),
    );
    let pre = g.add(1, Stream::Compute, k, vec![], label("k"));
    g.add(
        1,
        Stream::Comm(0),
        recv(0, 230_000_000, 0),
        vec![pre],
        label("r"),
    );
    let r = sim(&g, &hw, LinkModel::MaxMin);
    assert_eq!(r.makespan_ps, c + 3_000_000 + 1_000_000_000);
    // Device 0's send waited c without being in flight.
    assert_eq!(
        r.devices[0].comm_busy_s,
        ps_to_secs(3_000_000 + 1_000_000_000)
    );
}

#[test]
fn two_flows_out_of_one_egress_take_twice_as_long_with_maxmin() {
    // Device 0 sends 230 MB to devices 1 and 2 at once. Ideal: each flow at 230 GB/s,
    // α + 1 ms. MaxMin: they share gpu0's egress at 115 GB/s each, α + 2 ms.
    let hw = hw();
    let b = 230_000_000;
    let mut g = TaskGraph::new(3);
    g.add(0, Stream::Comm(0), send(1, b, 0), vec![], label("s1"));
    g.add(0, Stream::Comm(1), send(2, b, 0), vec![], label("s2"));
    g.add(1, Stream::Comm(0), recv(0, b, 0), vec![], label("r1"));
    g.add(2, Stream::Comm(0), recv(0, b, 0), vec![], label("r2"));
    let ideal = sim(&g, &hw, LinkModel::Ideal).makespan_ps;
    let maxmin = sim(&g, &hw, LinkModel::MaxMin).makespan_ps;
    assert_eq!(ideal, 3_000_000 + 1_000_000_000);
    assert_eq!(maxmin - 3_000_000, 2 * (ideal - 3_000_000));
}

#[test]
fn gpus_on_one_rail_share_their_nic() {
    // 2 nodes of 8 GPUs. GPUs 0 and 1 of node 0 send 240 MB each to node 1 (GPUs 8, 9).
    // With 8 NICs they use NICs 0 and 1: 14 µs + 10 ms each. With 1 NIC per node both go
    // through NIC 0 at 12 GB/s each under max-min: 14 µs + 20 ms.
    let mut hw = hw();
    let b = 240_000_000;
    let mut g = TaskGraph::new(16);
    for (src, dst) in [(0, 8), (1, 9)] {
        g.add(src, Stream::Comm(0), send(dst, b, 0), vec![], label("s"));
        g.add(dst, Stream::Comm(0), recv(src, b, 0), vec![], label("r"));
    }
    assert_eq!(
        sim(&g, &hw, LinkModel::MaxMin).makespan_ps,
        14_000_000 + 10_000_000_000
    );
    hw.inter_node.nics_per_node = 1;
    assert_eq!(
        sim(&g, &hw, LinkModel::MaxMin).makespan_ps,
        14_000_000 + 20_000_000_000
    );
    assert_eq!(
        sim(&g, &hw, LinkModel::Ideal).makespan_ps,
        14_000_000 + 10_000_000_000
    );
}

#[test]
fn collective_traffic_shares_links_with_point_to_point() {
    // All-gather of M over [0, 1] (one step: each rank sends M/2 to the other) while
    // device 0 also sends M/2 to device 1. MaxMin: the two 0 -> 1 flows share gpu0's egress
    // and gpu1's ingress at B/2, so both end at α + (M/2)/(B/2) = α + M/B; the 1 -> 0 flow
    // alone ends earlier. Ideal: everything ends at α + M/(2B).
    let hw = hw();
    let m = 460_000_000u64;
    let mut g = TaskGraph::new(2);
    for d in 0..2 {
        g.add(
            d,
            Stream::Comm(0),
            Work::Collective {
                op: CollectiveOp::AllGather,
                id: 9,
                group: vec![0, 1],
                bytes: m,
            },
            vec![],
            label("ag"),
        );
    }
    g.add(0, Stream::Comm(1), send(1, m / 2, 0), vec![], label("s"));
    g.add(1, Stream::Comm(1), recv(0, m / 2, 0), vec![], label("r"));
    assert_eq!(
        sim(&g, &hw, LinkModel::Ideal).makespan_ps,
        3_000_000 + 1_000_000_000
    );
    assert_eq!(
        sim(&g, &hw, LinkModel::MaxMin).makespan_ps,
        3_000_000 + 2_000_000_000
    );
}

/// A 2-device ring with a real double buffer, `steps` steps. At step k each device computes
/// on block k (buffer k % 2, compute stream) while it sends block k to its peer (comm 0)
/// and receives block k+1 into buffer (k+1) % 2 (comm 1). Dependencies: compute k needs
/// recv k-1 (its block arrived); send k needs recv k-1 (it forwards that block); recv k
/// needs compute k-1 (it overwrites the buffer compute k-1 read). No transfer in the last
/// step.
fn double_buffered_ring(steps: u32, kernel: &Work, bytes: u64) -> TaskGraph {
    let mut g = TaskGraph::new(2);
    let mut prev_recv = [None::<TaskId>; 2];
    let mut prev_comp = [None::<TaskId>; 2];
    for k in 0..steps {
        let mut recvs = [None; 2];
        for d in 0..2u32 {
            let deps: Vec<TaskId> = prev_recv[d as usize].into_iter().collect();
            let c = g.add(
                d,
                Stream::Compute,
                kernel.clone(),
                deps.clone(),
                label("attn"),
            );
            if k + 1 < steps {
                g.add(
                    d,
                    Stream::Comm(0),
                    send(1 - d, bytes, k as u64),
                    deps,
                    label("kv-send"),
                );
                let rdeps: Vec<TaskId> = prev_comp[d as usize].into_iter().collect();
                recvs[d as usize] = Some(g.add(
                    d,
                    Stream::Comm(1),
                    recv(1 - d, bytes, k as u64),
                    rdeps,
                    label("kv-recv"),
                ));
            }
            prev_comp[d as usize] = Some(c);
        }
        prev_recv = recvs;
    }
    g
}

#[test]
fn double_buffered_ring_overlaps_compute_and_transfer() {
    // Derivation (no slowdown): let c = kernel time, m = α + bytes/B. Transfer k runs from
    // max(end of transfer k-1, end of compute k-1) and compute k from max(end of compute
    // k-1, end of transfer k-1), so each step costs max(c, m) and the makespan is
    // (S-1)·max(c, m) + c. Per device: compute busy S·c; comm busy (S-1)·m; exposed
    // (S-1)·max(0, m - c).
    let hw = hw_no_slowdown();
    let s = 6u64;
    let bytes = 230_000_000u64; // m = 3 µs + 1 ms
    let m = 3_000_000 + 1_000_000_000u64;
    for kernel_bytes in [0.5e9, 3.3e9] {
        let (k, c) = kernel(&hw, kernel_bytes);
        let mut g = double_buffered_ring(s as u32, &k, bytes);
        g.add_kernel(KernelShape::Elementwise {
            bytes: kernel_bytes as u64,
        });
        g.check().unwrap();
        for model in [LinkModel::Ideal, LinkModel::MaxMin] {
            let r = sim(&g, &hw, model);
            assert_eq!(r.makespan_ps, (s - 1) * c.max(m) + c, "c = {c}, m = {m}");
            for d in &r.devices {
                assert_eq!(d.compute_busy_s, ps_to_secs(s * c));
                assert_eq!(d.comm_busy_s, ps_to_secs((s - 1) * m));
                assert_eq!(d.exposed_comm_s, ps_to_secs((s - 1) * m.saturating_sub(c)));
            }
        }
    }
}

#[test]
fn compute_slows_while_a_transfer_runs() {
    // Slowdown s = 0.1 (profile value). A kernel of c on device 0 runs beside a send of m.
    // m < c: during [0, m] the kernel does (1 - s)·m of work, then the rest at full speed:
    // it ends at m + c - round((1 - s)·m) ≈ c + s·m.
    // m > c: the kernel runs at 1 - s throughout and ends at ceil(c / (1 - s)).
    let hw = hw();
    assert_eq!(hw.overlap_compute_slowdown_fraction.value, 0.1);
    for (kernel_bytes, msg) in [(3.3e9, 230_000_000u64), (0.3e9, 460_000_000)] {
        let (k, c) = kernel(&hw, kernel_bytes);
        let mut g = with_kernel(2, kernel_bytes);
        let kt = g.add(0, Stream::Compute, k, vec![], label("gemm"));
        g.add(0, Stream::Comm(0), send(1, msg, 0), vec![], label("s"));
        g.add(1, Stream::Comm(0), recv(0, msg, 0), vec![], label("r"));
        let r = simulate(
            &g,
            &hw,
            LinkModel::MaxMin,
            SimOptions {
                trace: true,
                ..SimOptions::default()
            },
        )
        .unwrap();
        let m = 3_000_000 + xfer_ps(msg as f64, 230e9);
        let end = r
            .trace
            .unwrap()
            .spans
            .iter()
            .find(|sp| sp.task == kt)
            .unwrap()
            .end_ps;
        let want = if m < c {
            m + c - (m as f64 * 0.9).round() as u64
        } else {
            (c as f64 / 0.9).ceil() as u64
        };
        assert_eq!(end, want, "c = {c}, m = {m}");
        assert!(end > c);
        // Exposed communication only where the kernel is not running.
        assert_eq!(
            r.devices[0].exposed_comm_s,
            ps_to_secs(m.saturating_sub(end))
        );
    }
}

/// A graph with everything: compute, p2p with contention, collectives, memory.
fn busy_graph() -> TaskGraph {
    let hw = hw();
    let (k, _) = kernel(&hw, 1e8);
    let n = 4;
    let mut g = with_kernel(n, 1e8);
    let mut last = vec![None::<TaskId>; n as usize];
    for step in 0..5u64 {
        for d in 0..n {
            let deps: Vec<TaskId> = last[d as usize].into_iter().collect();
            let a = g.add(
                d,
                Stream::Compute,
                Work::Alloc {
                    bytes: 1 << 20,
                    tensor: "buf",
                },
                deps,
                label("alloc"),
            );
            let c = g.add(d, Stream::Compute, k.clone(), vec![a], label("attn"));
            g.add(
                d,
                Stream::Comm(0),
                send((d + 1) % n, 50_000_000, step),
                vec![a],
                label("s"),
            );
            g.add(
                d,
                Stream::Comm(3),
                send((d + 2) % n, 30_000_000, 100 + step),
                vec![a],
                label("s2"),
            );
            let r1 = g.add(
                d,
                Stream::Comm(1),
                recv((d + n - 1) % n, 50_000_000, step),
                vec![],
                label("r"),
            );
            let r2 = g.add(
                d,
                Stream::Comm(4),
                recv((d + n - 2) % n, 30_000_000, 100 + step),
                vec![],
                label("r2"),
            );
            let ar = g.add(
                d,
                Stream::Comm(2),
                Work::Collective {
                    op: CollectiveOp::AllReduce,
                    id: step,
                    group: (0..n).collect(),
                    bytes: 80_000_000,
                },
                vec![c],
                label("ar"),
            );
            let f = g.add(
                d,
                Stream::Compute,
                Work::Free {
                    bytes: 1 << 20,
                    tensor: "buf",
                },
                vec![r1, r2, ar],
                label("free"),
            );
            last[d as usize] = Some(f);
        }
    }
    g
}

#[test]
fn same_graph_gives_identical_results() {
    let g = busy_graph();
    g.check().unwrap();
    let hw = hw();
    let opts = SimOptions {
        trace: true,
        ..SimOptions::default()
    };
    let a = simulate(&g, &hw, LinkModel::MaxMin, opts).unwrap();
    let b = simulate(&g, &hw, LinkModel::MaxMin, opts).unwrap();
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
    let ta = crate::sim::chrome_trace_json(a.trace.as_ref().unwrap(), g.devices);
    let tb = crate::sim::chrome_trace_json(b.trace.as_ref().unwrap(), g.devices);
    assert_eq!(ta, tb);
    assert_eq!(a.tasks, g.tasks.len() as u64);
    // Contention makes MaxMin slower than Ideal on this graph.
    let ideal = simulate(&g, &hw, LinkModel::Ideal, opts).unwrap();
    assert!(
        ideal.makespan_ps < a.makespan_ps,
        "{} vs {}",
        ideal.makespan_ps,
        a.makespan_ps
    );
    // The trace is independent of whether it was asked for.
    let plain = simulate(&g, &hw, LinkModel::MaxMin, SimOptions::default()).unwrap();
    assert_eq!(plain.makespan_ps, a.makespan_ps);
    assert_eq!(plain.devices, a.devices);
}

#[test]
fn deadlock_is_detected_and_names_the_tasks() {
    // Device 0 posts a recv (task 0). Device 1's matching send (task 2) is queued behind a
    // kernel (task 1) that depends on that recv.
    let hw = hw();
    let (k, _) = kernel(&hw, 1e6);
    let mut g = with_kernel(2, 1e6);
    let r = g.add(
        0,
        Stream::Comm(0),
        recv(1, 1000, 5),
        vec![],
        label("kv-recv"),
    );
    g.add(1, Stream::Compute, k, vec![r], label("attn"));
    g.add(
        1,
        Stream::Compute,
        send(0, 1000, 5),
        vec![],
        label("kv-send"),
    );
    g.check().unwrap();
    let err = simulate(&g, &hw, LinkModel::MaxMin, SimOptions::default()).unwrap_err();
    let Error::Deadlock { message } = &err else {
        panic!("expected a deadlock, got {err}");
    };
    assert!(
        message.starts_with("3 of 3 tasks never finished"),
        "{message}"
    );
    assert!(
        message.contains(
            "task 0 (fwd.L0.attention.kv-recv on device 0 comm0) receives from device 1 \
             (tag 5) and waits for its send, task 2 (fwd.L0.attention.kv-send on device 1 \
             compute), which is queued behind task 1"
        ),
        "{message}"
    );
    assert!(
        message.contains("task 1 (fwd.L0.attention.attn on device 1 compute) waits for task 0"),
        "{message}"
    );
    assert_eq!(err.exit_code(), 1);
    assert!(err.to_string().starts_with("deadlock: "));
}

#[test]
fn collective_deadlock_names_the_missing_rank() {
    // Rank 1 of an all-reduce waits behind a recv that nobody sends... to device 1 from
    // device 0, whose send is behind the all-reduce on device 0's stream.
    let hw = hw();
    let ar = Work::Collective {
        op: CollectiveOp::AllReduce,
        id: 3,
        group: vec![0, 1],
        bytes: 1000,
    };
    let mut g = TaskGraph::new(2);
    g.add(0, Stream::Comm(0), ar.clone(), vec![], label("ar"));
    g.add(0, Stream::Comm(0), send(1, 8, 0), vec![], label("s"));
    g.add(1, Stream::Comm(0), recv(0, 8, 0), vec![], label("r"));
    g.add(1, Stream::Comm(0), ar, vec![], label("ar"));
    let err = simulate(&g, &hw, LinkModel::Ideal, SimOptions::default()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("waits for the other ranks of collective 3: task 3"),
        "{msg}"
    );
    assert!(msg.contains("is queued behind task 2"), "{msg}");
}

#[test]
fn memory_high_water_from_alloc_and_free() {
    // Device 0: +100, +50 (150 live: the peak), -100, +80 (130 live). Device 1: +10, -10.
    let hw = hw();
    let mut g = TaskGraph::new(2);
    let al = |bytes| Work::Alloc { bytes, tensor: "t" };
    let fr = |bytes| Work::Free { bytes, tensor: "t" };
    g.add(0, Stream::Compute, al(100), vec![], label("a"));
    g.add(0, Stream::Comm(0), al(50), vec![0], label("a"));
    g.add(0, Stream::Compute, fr(100), vec![1], label("f"));
    g.add(0, Stream::Compute, al(80), vec![], label("a"));
    g.add(1, Stream::Compute, al(10), vec![], label("a"));
    g.add(1, Stream::Compute, fr(10), vec![], label("f"));
    let r = sim(&g, &hw, LinkModel::MaxMin);
    assert_eq!(r.devices[0].memory_high_water_bytes, 150);
    assert_eq!(r.devices[1].memory_high_water_bytes, 10);
    assert_eq!(r.max_memory_high_water_bytes(), 150);
    assert_eq!(r.makespan_ps, 0);

    // Freeing more than is live is an error naming the task.
    let mut g = TaskGraph::new(1);
    g.add(0, Stream::Compute, al(10), vec![], label("a"));
    g.add(0, Stream::Compute, fr(11), vec![], label("f"));
    let err = simulate(&g, &hw, LinkModel::MaxMin, SimOptions::default()).unwrap_err();
    assert!(matches!(err, Error::InvalidGraph { .. }), "{err}");
    assert!(err.to_string().contains("task 1 frees 11 bytes"), "{err}");
}

#[test]
fn malformed_graphs_are_rejected() {
    let hw = hw();
    let mut g = TaskGraph::new(2);
    g.add(0, Stream::Comm(0), send(1, 8, 0), vec![], label("s"));
    let err = simulate(&g, &hw, LinkModel::MaxMin, SimOptions::default()).unwrap_err();
    assert!(
        err.to_string()
            .contains("send task 0 (0 -> 1, tag 0) has no matching recv"),
        "{err}"
    );
    let mut g = TaskGraph::new(2);
    g.add(0, Stream::Comm(0), send(1, 8, 0), vec![], label("s"));
    g.add(1, Stream::Comm(0), recv(0, 9, 0), vec![], label("r"));
    let err = simulate(&g, &hw, LinkModel::MaxMin, SimOptions::default()).unwrap_err();
    assert!(err.to_string().contains("carries 8 bytes"), "{err}");
    let mut g = TaskGraph::new(2);
    g.add(
        0,
        Stream::Compute,
        Work::Compute { kernel: 3 },
        vec![],
        label("k"),
    );
    let err = simulate(&g, &hw, LinkModel::MaxMin, SimOptions::default()).unwrap_err();
    assert!(
        err.to_string().contains("runs kernel 3 of a table of 0"),
        "{err}"
    );
    let mut g = TaskGraph::new(2);
    g.add(
        0,
        Stream::Comm(0),
        Work::Collective {
            op: CollectiveOp::Broadcast { root: 1 },
            id: 0,
            group: vec![0],
            bytes: 8,
        },
        vec![],
        label("b"),
    );
    let err = simulate(&g, &hw, LinkModel::MaxMin, SimOptions::default()).unwrap_err();
    assert!(
        err.to_string().contains("root 1 is not in its group"),
        "{err}"
    );
    let err = simulate(
        &TaskGraph::new(u32::MAX),
        &hw,
        LinkModel::MaxMin,
        SimOptions::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("more than the simulator handles"),
        "{err}"
    );
}

#[test]
fn self_send_and_zero_bytes_take_no_bandwidth_time() {
    // A device sending to itself costs nothing; a zero-byte message costs α only.
    let hw = hw();
    let mut g = TaskGraph::new(2);
    g.add(0, Stream::Comm(0), send(0, 1 << 30, 0), vec![], label("s"));
    g.add(0, Stream::Comm(1), recv(0, 1 << 30, 0), vec![], label("r"));
    assert_eq!(sim(&g, &hw, LinkModel::MaxMin).makespan_ps, 0);
    let mut g = TaskGraph::new(2);
    g.add(0, Stream::Comm(0), send(1, 0, 0), vec![], label("s"));
    g.add(1, Stream::Comm(1), recv(0, 0, 0), vec![], label("r"));
    assert_eq!(sim(&g, &hw, LinkModel::MaxMin).makespan_ps, 3_000_000);
}
