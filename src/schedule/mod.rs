//! Schedules: the task graph of one training step for each method.
//!
//! Input: a validated workload ([`ValidWorkload`]). Each method's file describes one step
//! as stages ([`StepPlan`]): compute kernels, blocking collectives, double-buffered rings and
//! METP's outer loop. [`lower`] turns a plan into a [`TaskGraph`] of compute, send/recv,
//! collective and alloc/free tasks per device and stream; the analytic model prices the same
//! plan in closed form. Depends on `config`, `memory`, `error`; never on `sim` or `analytic`.

mod common;
mod fp8;
mod graph;
mod kernels;
mod lower;
mod mailbox;
mod metp;
mod ring;
mod rsa;
mod shape;
mod stage;
mod times;
mod tp;
mod tp_sp;
mod ulysses;

pub use graph::{
    CollectiveOp, DeviceId, KernelId, Label, Pass, Periodic, Placement, Segment, Stream, Task,
    TaskGraph, TaskId, Work,
};
pub use kernels::{attention_bwd, attention_fwd, unfused_attention, AttnShape};
pub use lower::{
    graph_size, lower, lower_ops, op_program_size, Devices, GraphSize, LowerOptions, OpProgram,
    ProgramSize, Rounds, GRAPH_BYTES_PER_TASK,
};
pub use mailbox::Mailboxes;
pub use shape::{Attention, AttnPass, Gemm, GemmDtype, KernelKind, KernelShape};
pub use stage::{
    Axis, Block, CausalBlocks, Exchange, Kernel, LinearGemm, Outer, PhaseBlock, Ring, RingStep,
    Stage, StepPlan,
};
pub use times::StepTimes;

use crate::config::{LinearDtype, MethodId, ValidWorkload};

/// The step plan of a validated workload (its tensors' sizes come from the memory inventory
/// when the plan is lowered, [`lower`]).
pub fn plan(w: &ValidWorkload) -> StepPlan {
    PLANS_BUILT.with(|n| n.set(n.get() + 1));
    let mut plan = match w.method {
        MethodId::Metp => metp::plan(w),
        MethodId::Tp => tp::plan(w),
        MethodId::TpSp => tp_sp::plan(w),
        MethodId::Ulysses => ulysses::plan(w),
        MethodId::Ring => ring::plan(w),
        MethodId::Rsa => rsa::plan(w),
    };
    if w.options.linear_dtype == LinearDtype::Fp8 {
        fp8::apply(&mut plan);
    }
    plan
}

thread_local! {
    /// Step plans built on this thread (instrumentation: see [`plans_built`]).
    static PLANS_BUILT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many step plans this thread has built so far: lets a test check that an evaluation
/// builds each workload's plan once. Never part of a result.
pub fn plans_built() -> u64 {
    PLANS_BUILT.with(|n| n.get())
}
