//! The CUDA/NCCL backend of `calibrate` and `run`, behind the cargo feature `cuda` (the
//! ripgrep-style pair: `enabled/` with the feature, `disabled.rs` — a stub returning one clear
//! error — without it), plus what needs no GPU and is built always: the CUDA C sources of the
//! kernels (`kernels/*.cu`, [`sources`]), where the attention units put their buffers and which
//! heads their batched GEMMs pair ([`layout`]), and the kernel model of those kernels' tiles that a
//! fit of this backend's measurements starts from ([`sources::attention_model`]). What a
//! calibration measures with it (`calibrate::grid`) and how its measurements are fitted
//! (`fitting`) are not here.
//!
//! With the feature, [`open`] probes the driver, NVRTC, cuBLAS and NCCL libraries before any
//! use (cudarc panics on a missing library; the probe turns that into an error), compiles the
//! kernels with NVRTC for the device's architecture, and measures: bf16 cuBLAS GEMMs, the own
//! FlashAttention-2-style attention kernels forward and backward, copies and element-wise
//! passes, the per-launch host overhead, NCCL send/recv between GPU pairs and collectives (two
//! GPUs or more), and a GEMM's slowdown under communication. It runs METP's and Megatron TP's
//! attention and MLP units forward and backward on p virtual devices — one per GPU with NCCL
//! when there are p GPUs, else all on GPU 0 with ring messages emulated by copies on a second
//! stream — each device's buffers tracked by name (the tracked peak, which `memory::unit`
//! predicts) and allocated from a memory pool of its own, whose high-water mark the driver
//! keeps (the measured peak).
//! See `enabled/mod.rs` for the details.
//!
//! Depends on the backend's trait and shared parts (`backend::unit`, `backend::repeat`,
//! `backend::busbw`), `config`, `memory`, `schedule` and `error`; never on `backend::cpu`,
//! `fitting` or `calibrate`. Its units share the algorithms of the backend's `unit`, not the
//! CPU's programs.

pub mod layout;
pub mod sources;

#[cfg(feature = "cuda")]
mod enabled;
#[cfg(feature = "cuda")]
pub use enabled::*;

#[cfg(not(feature = "cuda"))]
mod disabled;
#[cfg(not(feature = "cuda"))]
pub use disabled::*;
