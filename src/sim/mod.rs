//! Discrete-event simulator: replays a step's [`TaskGraph`](crate::schedule::TaskGraph) on
//! per-device streams over a network of links, and reports the step time, per-device busy and
//! exposed-communication time, memory high-water marks and, on request, a trace.
//!
//! Inputs: a task graph ([`crate::schedule`]), a [`Hardware`](crate::config::Hardware) profile,
//! a [`LinkModel`] and [`SimOptions`]. Output: a [`SimResult`] (or an error for a malformed or
//! deadlocked graph). Durations come from the shared [`CostModel`](crate::cost::CostModel), so
//! the simulator prices work exactly as the analytic model does; the two must never depend on
//! each other (DESIGN §3), and this module also never depends on `cli`.
//!
//! Layout, one responsibility per file:
//! - [`queue`]: the event queue, integer picosecond time, FIFO ties;
//! - [`maxmin`]: a max-min fair bandwidth solver (progressive filling), knowing nothing of GPUs;
//! - [`network`]: the links of a profile (GPU ports, rail-optimised NICs), routes, α, and the
//!   flows in flight under [`LinkModel::Ideal`] or [`LinkModel::MaxMin`];
//! - [`collective`]: collectives as NCCL ring steps;
//! - [`engine`]: the executor (streams, rendezvous, fluid compute slowdown, accounting);
//! - [`trace`]: Chrome trace JSON.
//!
//! ```
//! use metp_sim::schedule::{Label, OpKind, Pass, Stream, TaskGraph, Work};
//! use metp_sim::sim::{simulate, LinkModel, SimOptions};
//!
//! let hw = metp_sim::config::load_hardware("dgx-a100-80gb").unwrap();
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
pub mod engine;
pub mod maxmin;
pub mod network;
pub mod queue;
pub mod trace;

pub use engine::{simulate, DeviceStats, SimOptions, SimResult, Span, Trace, Track};
pub use network::{LinkModel, Network};
pub use queue::{ps_to_secs, secs_to_ps, SimTime};
pub use trace::{chrome_trace_json, write_chrome_trace};
