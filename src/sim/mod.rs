//! Discrete-event simulator: replays a step's [`TaskGraph`](crate::schedule::TaskGraph) on
//! per-device streams over a network of links, and reports the step time, per-device busy and
//! exposed-communication time, memory high-water marks and, on request, a trace.
//!
//! Inputs: a task graph ([`crate::schedule`]), a [`Hardware`](crate::config::Hardware) profile,
//! a [`LinkModel`] and [`SimOptions`]. Output: a [`SimResult`] (or an error for a malformed or
//! deadlocked graph). Durations come from the shared [`CostModel`](crate::cost::CostModel), so
//! the simulator prices work exactly as the analytic model does; the two must never depend on
//! each other (DESIGN §3). Depends on `config`, `cost`, `memory`, `schedule` and `error`; never
//! on `analytic`.
//!
//! Layout, one responsibility per file:
//! - [`queue`]: the event queue, integer picosecond time, FIFO ties;
//! - [`maxmin`]: a max-min fair bandwidth solver (progressive filling), knowing nothing of GPUs;
//! - [`network`]: the links of a profile (GPU ports, rail-optimised NICs), routes, α, and the
//!   flows in flight under [`LinkModel::Ideal`] or [`LinkModel::MaxMin`];
//! - [`collective`]: collectives as NCCL ring steps;
//! - [`engine`]: the executor — preparation (validating and indexing the graph, pricing
//!   kernels), the event loop (streams, rendezvous, fluid compute slowdown, accounting) and
//!   deadlock diagnosis;
//! - [`trace`]: spans of a run ([`Span`], [`Trace`]) and their Chrome trace JSON;
//! - `workload`: a workload's plan lowered with its inventory and simulated
//!   ([`simulate_plan`]);
//! - `shorten`: the same from a shortened copy of the step, where the engine proves the rest
//!   repeats it ([`simulate_shortened`]; the engine's recurrence monitor);
//! - `compose`: a step composed from its distinct op programs, each simulated once, by a walk
//!   of the 1F1B orders ([`simulate_composed`]; the fast path for steps too large otherwise).
//!
//! ```
//! use metp_sim::schedule::{Label, Pass, Stream, TaskGraph, Work};
//! use metp_sim::sim::{simulate, LinkModel, SimOptions};
//!
//! let mut hw = metp_sim::config::load_hardware("dgx-a100-80gb").unwrap();
//! hw.intra_node.bytes_per_s_per_direction.value = 230e9;
//! hw.intra_node.p2p_latency_s.value = 3e-6;
//! hw.collective_library = None; // messages at the port's rate (no library send/recv rate)
//! let label = Label { pass: Pass::Fwd, layer: Some(0), block: "attention", name: "kv",
//!                     outer: None, step: None, micro_batch: 0 };
//! let mut g = TaskGraph::new(2);
//! // 230 MB from device 0 to device 1: α + bytes / B = 3 µs + 1 ms.
//! g.add(0, Stream::Comm(0), Work::Send { to: 1, bytes: 230_000_000, tag: 0 }, vec![], label);
//! g.add(1, Stream::Comm(0), Work::Recv { from: 0, bytes: 230_000_000, tag: 0 }, vec![], label);
//! let r = simulate(&g, &hw, LinkModel::MaxMin, SimOptions::default()).unwrap();
//! assert_eq!(r.makespan_ps, 1_003_000_000);
//! ```

pub mod collective;
mod compose;
pub mod engine;
mod flows;
pub mod maxmin;
pub mod network;
pub mod queue;
mod shorten;
pub mod trace;
mod workload;

pub use compose::{composed_size, simulate_composed, Composition};
pub use engine::{simulate, DeviceStats, PeriodProof, SimOptions, SimResult};
pub use shorten::{shortening, simulate_shortened, Shortened, SHORT_LAYERS, SHORT_ROUNDS};

/// The DGX-A100 profile with the round link figures the simulator's tests derive their
/// expected times from (230 GB/s per direction, α = 3 µs inside a node, no collective
/// library), whatever the bundled profile says.
#[cfg(test)]
pub(crate) fn test_hardware() -> crate::config::Hardware {
    let mut hw = crate::config::load_hardware("dgx-a100-80gb")
        .unwrap_or_else(|e| unreachable!("bundled profile: {e}"));
    hw.intra_node.bytes_per_s_per_direction.value = 230e9;
    hw.intra_node.p2p_latency_s.value = 3e-6;
    // No collective library: a collective's steps cost the point-to-point α, at the port's
    // rate, and messages move at the port's rate (the round figures above).
    hw.collective_library = None;
    hw
}
pub use network::{LinkModel, Network};
pub use queue::{ps_to_secs, secs_to_ps, SimTime};
pub use trace::{chrome_trace_json, write_chrome_trace, Span, Trace, Track};
pub use workload::{
    simulate_plan, StageTimes, TraceScope, WorkloadSim, ENGINE_BYTES_PER_TASK, TRACE_BYTES_PER_TASK,
};

#[cfg(test)]
mod tests {
    /// The simulator must stay independent of the analytic model (so the two can check each
    /// other) and of everything above it (DESIGN §3).
    #[test]
    fn depends_on_neither_analytic_nor_anything_above_it() {
        let sources = [
            ("mod.rs", include_str!("mod.rs")),
            ("queue.rs", include_str!("queue.rs")),
            ("maxmin.rs", include_str!("maxmin.rs")),
            ("network.rs", include_str!("network.rs")),
            ("collective.rs", include_str!("collective.rs")),
            ("engine.rs", include_str!("engine.rs")),
            ("engine/prepare.rs", include_str!("engine/prepare.rs")),
            ("engine/event_loop.rs", include_str!("engine/event_loop.rs")),
            ("engine/deadlock.rs", include_str!("engine/deadlock.rs")),
            ("engine/recurrence.rs", include_str!("engine/recurrence.rs")),
            ("shorten.rs", include_str!("shorten.rs")),
            ("compose.rs", include_str!("compose.rs")),
            ("trace.rs", include_str!("trace.rs")),
        ];
        let forbidden = ["analytic", "cli", "search", "sweep", "report", "plot"];
        for (file, src) in sources {
            for m in forbidden {
                for prefix in ["crate::", "metp_sim::"] {
                    let path = format!("{prefix}{m}");
                    let hit = src
                        .lines()
                        .filter(|l| !l.trim_start().starts_with("//"))
                        .any(|l| {
                            l.contains(&format!("{path}::")) || l.contains(&format!("{path};"))
                        });
                    assert!(!hit, "src/sim/{file} uses {path}");
                }
            }
        }
    }
}
