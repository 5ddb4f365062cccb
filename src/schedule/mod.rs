//! Schedules: the task graph of one training step for each method.
//!
//! Input: a validated workload and its memory inventory. Output: a [`TaskGraph`] of compute,
//! send/recv, collective and alloc/free tasks per device and stream. One file per method builds
//! its graph. Depends on `config`, `memory`, `error`; never on `sim` or `analytic`.

mod graph;

pub use graph::{
    CollectiveOp, DeviceId, Label, OpKind, Pass, Stream, Task, TaskGraph, TaskId, Work,
};
