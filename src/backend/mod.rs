//! The [`Backend`] trait: what a machine must be able to measure for `calibrate` and `run`, and
//! the shapes it is asked about (GEMMs, attention calls of any shape, memory-bound kernels,
//! messages). Implemented by [`super::cpu`] (always), [`super::mock`] (tests) and
//! [`super::cuda`] (feature `cuda`). What only a GPU node measures (host overhead,
//! point-to-point messages between given devices, collectives, compute slowdown under a
//! collective) has default methods returning `Ok(None)`.

pub mod busbw;
pub mod cpu;
pub mod cuda;
pub mod mock;
pub mod predict;

use serde::Serialize;

use crate::backend::cpu::device::Link;
use crate::backend::cpu::units::{RunReport, RunSpec};
use crate::config::UnitSupport;
use crate::error::Result;
pub use crate::fitting::measurements::Timing;

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
    /// line before anything runs ([`UnitSupport::check`]). The default is the CPU reference
    /// runtime's ([`crate::backend::cpu::units::SUPPORT`]); a backend that does less must say so.
    fn support(&self) -> UnitSupport {
        crate::backend::cpu::units::SUPPORT
    }
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
    fn runtime(&self) -> predict::Runtime {
        predict::Runtime::Cpu
    }
}
