//! Backends: the machines units run on and calibrations measure, side by side under one trait.
//!
//! The [`Backend`] trait is what a machine must be able to measure for `calibrate` and `run`:
//! GEMMs ([`GemmShape`]), attention calls of any shape ([`AttnCall`], [`Pass`]), element-wise
//! passes and copies, messages and collectives, a GEMM's slowdown under traffic
//! ([`SlowdownSample`]), and whole METP and TP units. What only a GPU node measures (host
//! overhead, messages between given devices, collectives, slowdown under a collective) has
//! default methods returning `Ok(None)`. Its implementations:
//!
//! - [`cpu`]: the CPU backend (always built): virtual devices as threads ([`cpu::device`]) and
//!   METP's and TP's units on them ([`cpu::units`]);
//! - [`cuda`]: the CUDA/NCCL backend behind the cargo feature `cuda` (a stub that returns a
//!   clear error otherwise): its GPUs, NVRTC kernels and units (`cuda/enabled/`), the kernels'
//!   CUDA C sources (built always);
//! - [`mock`]: exact synthetic numbers from a known profile, for tests of the fitting.
//!
//! What they share: [`unit`](mod@unit), a unit run on any backend (its spec and report, the units'
//! algorithms, inputs and f64 reference, the parts of a virtual device), which the CPU's and the
//! CUDA's units both run; [`predict`], a unit's time from a profile following the program of the
//! runtime that runs it ([`Runtime`]); [`busbw`], nccl-tests' collective sizes; [`repeat`], the
//! warm-ups, repetitions and median a call is timed with. A new backend (ROCm/HIP one day) is a
//! folder beside `cpu/` and `cuda/` that implements [`Backend`] over [`unit`](mod@unit).
//!
//! Depends on `config`, `cost` (the prices of predictions and of the mock), `memory` (the unit
//! inventory runs report beside their measured bytes), `schedule` (kernel shapes) and `error`;
//! never on `fitting`, `calibrate`, `report` or `cli`: measuring is below fitting.

pub mod busbw;
pub mod cpu;
pub mod cuda;
pub mod mock;
pub mod predict;
pub mod repeat;
pub mod unit;

use serde::{Deserialize, Serialize};

use crate::backend::unit::device::Link;
use crate::backend::unit::{RunReport, RunSpec};
use crate::config::UnitSupport;
use crate::error::Result;

/// An m×k by k×n matrix product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct GemmShape {
    /// Rows of the product.
    pub m: usize,
    /// Columns of the product.
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
}

impl GemmShape {
    /// A shape.
    pub fn new(m: usize, n: usize, k: usize) -> GemmShape {
        GemmShape { m, n, k }
    }
    /// 2·m·n·k.
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }
}

/// One fused attention call: `batch` sequences × `heads` heads, `q_tokens` queries against
/// `kv_tokens` keys, head dimension `head_dim`, causal or not (queries and keys aligned at
/// their ends). A METP ring step's block is `batch = b`, `heads = a/p`, `q_tokens = kv_tokens =
/// s/p`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct AttnCall {
    /// Sequences.
    pub batch: usize,
    /// Heads (query and key/value heads alike).
    pub heads: usize,
    /// Query tokens per sequence.
    pub q_tokens: usize,
    /// Key/value tokens per sequence.
    pub kv_tokens: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// Causal mask.
    pub causal: bool,
}

impl AttnCall {
    /// A square, non-causal block of `c` tokens (a ring step's).
    pub fn block(batch: usize, c: usize, heads: usize, head_dim: usize) -> AttnCall {
        AttnCall {
            batch,
            heads,
            q_tokens: c,
            kv_tokens: c,
            head_dim,
            causal: false,
        }
    }

    /// The kernel shape of a pass, as the cost model prices it.
    pub fn shape(&self, pass: Pass) -> crate::schedule::Attention {
        crate::schedule::Attention {
            batch: self.batch as u64,
            heads: self.heads as u64,
            kv_heads: self.heads as u64,
            q_tokens: self.q_tokens as u64,
            kv_tokens: self.kv_tokens as u64,
            head_dim: self.head_dim as u64,
            causal: self.causal,
            pass: match pass {
                Pass::Forward => crate::schedule::AttnPass::Fwd,
                Pass::Backward => crate::schedule::AttnPass::Bwd,
            },
        }
    }

    /// FLOPs of a pass as the cost model counts them (forward 4·pairs·d per head, backward
    /// 2.5 × forward).
    pub fn flops(&self, pass: Pass) -> f64 {
        self.shape(pass).flops()
    }
}

/// Forward or backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pass {
    /// Forward.
    Forward,
    /// Backward.
    Backward,
}

/// What a measured time includes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Timing {
    /// One call timed alone with events around it: the device time plus the launch latency,
    /// and never less than the host's time per call.
    Isolated,
    /// The kernel's own time.
    Device,
}

/// Whose unit programs a prediction follows. The CPU runtime ([`cpu::units`]) copies a buffer
/// into the channel when it sends it and adds gradient products with an element-wise pass; the
/// CUDA backend's units send by a copy on a second stream or NCCL (the message itself: no
/// compute-stream kernel) and accumulate weight gradients in the GEMM (β = 1, fp32 output).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// The CPU runtime's programs ([`cpu::units`]).
    #[default]
    Cpu,
    /// The CUDA backend's units ([`cuda`], feature `cuda`).
    Cuda,
}

/// A GEMM timed alone and while a transfer into the same device runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SlowdownSample {
    /// Seconds per GEMM alone.
    pub alone_s: f64,
    /// Seconds per GEMM with the transfer running.
    pub with_transfer_s: f64,
}

/// A machine that can be measured. All times are seconds per call, robust statistics (medians)
/// over repetitions chosen by the backend.
pub trait Backend {
    /// `cpu`, `cuda` or `mock`.
    fn name(&self) -> &'static str;
    /// What is measured, in words (the CPU, the GPU and its count, the link throttle).
    fn device(&self) -> String;
    /// Virtual devices (CPU threads, GPUs) the measurements run on at once.
    fn devices(&self) -> usize;
    /// Memory of one device, in bytes.
    fn memory_bytes(&self) -> u64;
    /// Streaming multiprocessors of one device, when the backend knows them.
    fn sm_count(&self) -> Option<u64> {
        None
    }
    /// The CPU link throttle the transfers run through, if any.
    fn link(&self) -> Option<Link> {
        None
    }
    /// One GEMM.
    fn gemm_s(&mut self, shape: GemmShape) -> Result<f64>;
    /// One fused attention call, forward or backward.
    fn attention_s(&mut self, shape: AttnCall, pass: Pass) -> Result<f64>;
    /// One element-wise kernel (GeLU) moving `bytes` (bf16 in and out: 4 bytes per element).
    fn elementwise_s(&mut self, bytes: u64) -> Result<f64>;
    /// One device-local copy of a buffer moving `bytes` (4 per bf16 element: read and write):
    /// the memory bandwidth the profile's `hbm_bytes_per_s` holds.
    fn copy_s(&mut self, bytes: u64) -> Result<f64>;
    /// One point-to-point message of `bytes` between two devices.
    fn transfer_s(&mut self, bytes: u64) -> Result<f64>;
    /// A GEMM alone and while a stream of `bytes` messages arrives at its device.
    fn slowdown(&mut self, gemm: GemmShape, bytes: u64) -> Result<SlowdownSample>;
    /// Executes one unit (METP or TP, attention or MLP) and reports error, memory and time.
    fn run_unit(&mut self, spec: &RunSpec) -> Result<RunReport>;
    /// The unit options this backend honours; a unit asking for another is refused with one
    /// line before anything runs ([`UnitSupport::check`]). Every backend says its own (the CPU
    /// runtime's is [`cpu::units::SUPPORT`]).
    fn support(&self) -> UnitSupport;
    /// What the backend's kernel times include: `Isolated` (default; GPU backends time one
    /// call with events around it, so launch latency is in the time) or `Device` (the kernel's
    /// own time: the CPU runs kernels as plain function calls). The fit prices measurements
    /// the same way.
    fn timing(&self) -> Timing {
        Timing::Isolated
    }
    /// What carries [`Backend::p2p_s`], [`Backend::collective_s`] and
    /// [`Backend::slowdown_under_collective`]'s traffic, as a measurement file's `via` names it
    /// ("nccl").
    fn p2p_via(&self) -> Option<&'static str> {
        None
    }
    /// What carries [`Backend::transfer_s`] and [`Backend::slowdown`]'s traffic, as a
    /// measurement file's `via` names it ("copy-emulation": copies on one GPU standing in for
    /// a link).
    fn transfer_via(&self) -> Option<&'static str> {
        None
    }
    /// How the backend times a call, in a sentence or more, for the measurement file's `what`.
    fn measurement_note(&self) -> String {
        "Each time is the backend's median per call.".into()
    }
    /// Host time of one operation issued to the device (the per-op overhead), if measured.
    fn host_overhead_s(&mut self) -> Result<Option<f64>> {
        Ok(None)
    }
    /// One point-to-point message of `bytes` from device `from` to device `to`, if measured.
    fn p2p_s(&mut self, _from: usize, _to: usize, _bytes: u64) -> Result<Option<f64>> {
        Ok(None)
    }
    /// One collective (`all-reduce`, `all-gather`, `reduce-scatter`, `all-to-all`) over
    /// `ranks` devices of `bytes` as nccl-tests define them for the op, if measured.
    fn collective_s(&mut self, _op: &str, _ranks: usize, _bytes: u64) -> Result<Option<f64>> {
        Ok(None)
    }
    /// A GEMM alone and while a collective of `bytes` runs on its device, if measured.
    fn slowdown_under_collective(
        &mut self,
        _gemm: GemmShape,
        _bytes: u64,
    ) -> Result<Option<SlowdownSample>> {
        Ok(None)
    }
    /// Whether `run_unit` and `attention_s` run forward passes only (then predictions and
    /// measurements leave the backward pass out).
    fn forward_only(&self) -> bool {
        false
    }
    /// How much slower each of `p` devices computes than in a profile measured with
    /// `profile_devices` devices at once (devices sharing cores or one GPU).
    fn compute_scale(&self, _p: usize, _profile_devices: usize) -> f64 {
        1.0
    }
    /// How much longer each message of `p` devices takes than one measured alone (devices
    /// whose transfers share one copy engine or stream).
    fn transfer_scale(&self, _p: usize) -> f64 {
        1.0
    }
    /// Whose unit programs this backend runs (what its predictions follow).
    fn runtime(&self) -> Runtime {
        Runtime::Cpu
    }
}
