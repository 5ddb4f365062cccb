//! Schedules: the task graph of one training step for each method.
//!
//! Input: a validated workload and its memory inventory. Each method's file describes one step
//! as stages ([`StepPlan`]): compute kernels, blocking collectives, double-buffered rings and
//! METP's outer loop. [`lower`] turns a plan into a [`TaskGraph`] of compute, send/recv,
//! collective and alloc/free tasks per device and stream; the analytic model prices the same
//! plan in closed form. Depends on `config`, `memory`, `error`; never on `sim` or `analytic`.

mod common;
mod graph;
mod kernels;
mod lower;
mod metp;
mod ring;
mod rsa;
mod shape;
mod stage;
mod tp;
mod tp_sp;
mod ulysses;

pub use graph::{
    CollectiveOp, DeviceId, KernelId, Label, Pass, Stream, Task, TaskGraph, TaskId, Work,
};
pub use kernels::{attention_bwd, attention_fwd, AttnShape};
pub use lower::{lower, LowerOptions};
pub use shape::{Attention, AttnPass, Gemm, KernelKind, KernelShape};
pub use stage::{
    Block, CausalBlocks, Exchange, Kernel, Outer, PhaseBlock, Ring, RingStep, Stage, StepPlan,
};

use crate::config::{MethodId, Workload};
use crate::error::Result;

/// The step plan of a workload (validated through its memory inventory first).
pub fn plan(w: &Workload) -> Result<StepPlan> {
    crate::memory::inventory(w)?;
    Ok(match w.method {
        MethodId::Metp => metp::plan(w),
        MethodId::Tp => tp::plan(w),
        MethodId::TpSp => tp_sp::plan(w),
        MethodId::Ulysses => ulysses::plan(w),
        MethodId::Ring => ring::plan(w),
        MethodId::Rsa => rsa::plan(w),
    })
}
