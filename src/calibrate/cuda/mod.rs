//! The CUDA/NCCL backend, behind the cargo feature `cuda` (ripgrep-style pair: `enabled.rs`
//! with the feature, `disabled.rs` — a stub returning one clear error — without it).
//!
//! With the feature, [`open`] probes the driver, NVRTC, cuBLAS and NCCL libraries before any
//! use (cudarc panics on a missing library; the probe turns that into an error), then
//! measures bf16 GEMMs (cuBLAS `gemm_ex`, fp32 accumulation), NVRTC element-wise kernels
//! (softmax with log-sum-exp, log-sum-exp merge, GeLU), point-to-point transfers (NCCL
//! send/recv between two GPUs of the node from one process; with a single GPU, a stated
//! emulation: device-to-device copies on a second stream), the slowdown of a GEMM while a
//! transfer runs on another stream, and METP units' forward rings with two streams and events
//! for double buffering.

#[cfg(feature = "cuda")]
mod enabled;
#[cfg(feature = "cuda")]
pub use enabled::*;

#[cfg(not(feature = "cuda"))]
mod disabled;
#[cfg(not(feature = "cuda"))]
pub use disabled::*;
