//! Class 8 — unbounded cost on plausible inputs: `plan --gpus 1024 --seq 512k` took 39 s and
//! 5.7 GB, `simulate --method ring --p 256 --nodes 32 --seq 1m` 5.6 GB, `--trace` on such runs
//! hundreds of MB. Every command states its limits in `--help`; a step beyond them is refused
//! from its estimate; concurrent simulations share one memory budget; a large trace records
//! one representative device unless asked for all.

use std::time::{Duration, Instant};

use metp_sim::config::limits;
use metp_sim::schedule::{CollectiveOp, Label, Pass, Stream, TaskGraph, Work};
use metp_sim::sim::{simulate, LinkModel, SimOptions, Track};

use super::{refuses, succeeds};

#[test]
fn every_command_states_its_limits_in_help() {
    for cmd in [
        "memory",
        "maxseq",
        "simulate",
        "sweep",
        "overlap",
        "validate",
        "plan",
        "run",
        "calibrate",
        "kernels",
        "gpu-check",
    ] {
        let out = succeeds(&[cmd, "--help"]);
        assert!(out.contains("Limits (README \"Limits\"):"), "{cmd}: {out}");
        assert!(out.contains("input file size: 8 MiB"), "{cmd}");
    }
    assert!(succeeds(&["simulate", "--help"]).contains("simulated task graph: 2^24 tasks"));
    assert!(succeeds(&["plan", "--help"]).contains("plan: GPUs (--gpus) / global batch"));
    assert!(succeeds(&["run", "--help"]).contains("CPU link throttle"));
}

/// The README's "Limits" section is the table the commands quote.
#[test]
fn the_readme_quotes_the_limits_table() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let table = limits::markdown();
    assert!(
        readme.contains(&table),
        "README.md's Limits section differs from config::limits::markdown():\n{table}"
    );
}

#[test]
fn large_steps_are_refused_from_their_estimate() {
    let t0 = Instant::now();
    let e = refuses(
        &[
            "simulate", "--method", "ring", "--p", "256", "--nodes", "32", "--seq", "1m",
        ],
        1,
    );
    assert!(e.contains("tasks") && e.contains("--extrapolate"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
}

/// Two reservations larger than half the budget run one after the other, never together.
#[test]
fn concurrent_simulations_share_one_memory_budget() {
    let budget = limits::memory_budget_bytes();
    let share = budget / 2 + 1;
    let live = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let live = live.clone();
            std::thread::spawn(move || {
                let _r = limits::reserve_memory(share, "test", "").unwrap();
                let now = live.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                assert_eq!(now, 1, "two large reservations held at once");
                std::thread::sleep(Duration::from_millis(30));
                live.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

/// A trace of one device records that device's stream spans and only the link spans of the
/// messages it takes part in.
#[test]
fn a_one_device_trace_keeps_that_devices_spans() {
    let label = Label {
        pass: Pass::Fwd,
        layer: Some(0),
        block: "attention",
        name: "kv",
        outer: None,
        step: None,
        micro_batch: 0,
    };
    let mut g = TaskGraph::new(4);
    // 0 -> 1 and 2 -> 3.
    for (from, to, tag) in [(0, 1, 0), (2, 3, 1)] {
        g.add(
            from,
            Stream::Comm(0),
            Work::Send {
                to,
                bytes: 1 << 20,
                tag,
            },
            vec![],
            label,
        );
        g.add(
            to,
            Stream::Comm(0),
            Work::Recv {
                from,
                bytes: 1 << 20,
                tag,
            },
            vec![],
            label,
        );
    }
    // A ring all-reduce over the four: device 1 sends only to 2 and receives only from 0, so a
    // trace of device 1 keeps those flows and none of 2 -> 3 or 3 -> 0.
    for d in 0..4 {
        g.add(
            d,
            Stream::Comm(1),
            Work::Collective {
                op: CollectiveOp::AllReduce,
                id: 7,
                group: vec![0, 1, 2, 3],
                bytes: 1 << 24,
            },
            vec![],
            label,
        );
    }
    let hw = metp_sim::config::load_hardware("dgx-a100-80gb").unwrap();
    let all = simulate(
        &g,
        &hw,
        LinkModel::MaxMin,
        SimOptions {
            trace: true,
            trace_device: None,
            periodic: false,
        },
    )
    .unwrap();
    let one = simulate(
        &g,
        &hw,
        LinkModel::MaxMin,
        SimOptions {
            trace: true,
            trace_device: Some(1),
            periodic: false,
        },
    )
    .unwrap();
    assert_eq!(all.makespan_ps, one.makespan_ps);
    let spans = &one.trace.unwrap().spans;
    let all_spans = &all.trace.unwrap().spans;
    assert!(spans.len() < all_spans.len());
    // Links of one DGX node: 2·d is GPU d's egress, 2·d + 1 its ingress (sim::Network).
    let collective_links = |spans: &[metp_sim::sim::Span]| -> std::collections::BTreeSet<u32> {
        spans
            .iter()
            .filter(|s| s.collective_step.is_some())
            .filter_map(|s| match s.track {
                Track::Link { link } => Some(link),
                _ => None,
            })
            .collect()
    };
    assert_eq!(
        collective_links(all_spans),
        (0..8).collect::<std::collections::BTreeSet<u32>>()
    );
    // Device 1's egress and ingress, and the ends of its flows (0's egress, 2's ingress).
    assert_eq!(
        collective_links(spans),
        [0, 2, 3, 5]
            .into_iter()
            .collect::<std::collections::BTreeSet<u32>>()
    );
    assert!(spans.iter().all(|s| match s.track {
        Track::Stream { device, .. } => device == 1,
        Track::Link { .. } => s.task == 0 || s.collective_step.is_some(), // the send 0 -> 1
    }));
    assert!(spans
        .iter()
        .any(|s| matches!(s.track, Track::Link { .. }) && s.collective_step.is_none()));
}
