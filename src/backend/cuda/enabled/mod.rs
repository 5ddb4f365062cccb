//! The CUDA/NCCL backend (feature `cuda`), on cudarc 0.19 with the libraries loaded at run
//! time (`cuda-12080` bindings; the libraries are found by name, CUDA 12 or 13 — see
//! `scripts/gpu-check.sh`).
//!
//! - [`open`](open()): the entry points, [`probe`](probe()) (what is there, in one line) and
//!   [`open`](open()) (the backend);
//! - [`probe`](mod@probe): libraries and devices, probed before any use (cudarc panics on a missing
//!   library); every failure is one [`Error::Unavailable`] line.
//! - [`nvrtc`]: the kernels of `kernels/*.cu` compiled by NVRTC for the GPU's architecture
//!   (once per process), loaded with the shared memory the attention kernels need.
//! - [`gpu`]: one GPU — context (cudarc's buffer event tracking off), compute and
//!   communication streams, cuBLAS (bf16 `gemm_ex`, fp32 accumulation, row-major operands),
//!   raw device memory, events.
//! - [`ops`]: kernel launches — element-wise passes, the fused attention forward/backward
//!   (FlashAttention-2 style, bf16 tensor cores, log-sum-exp merging), the unfused
//!   attention's row kernels.
//! - [`mem`]: the tracked allocator (per virtual device high-water mark by buffer name) and
//!   each virtual device's memory pool (the driver's high-water mark: the measured peak).
//! - [`xfer`]: messages between virtual devices (copies on one GPU — a stated emulation —,
//!   NCCL send/recv between GPUs) and NCCL communicators for the measurements.
//! - [`units`]: METP and TP, attention and MLP, forward and backward.
//! - [`selftest`]: the fused kernels against a host reference (for the GPU tests).
//! - [`backend`]: the [`Backend`](crate::backend::Backend) implementation: measurements
//!   timed with CUDA events, units.
//!
//! This file holds only what every file here uses (the error helpers) and the folder's public
//! names. Depends on `backend::unit`, `backend::repeat`, `backend::busbw`, `config`, `memory`
//! and `error`; never on `backend::cpu`, `fitting` or `calibrate`.

mod backend;
mod gpu;
mod mem;
mod nvrtc;
mod open;
mod ops;
mod probe;
mod selftest;
mod units;
mod xfer;

pub use backend::CudaBackend;
pub use nvrtc::compile_ptx;
pub use open::{open, probe};
pub use selftest::{flash_selftest, FlashCheck};

pub(crate) use crate::error::{Error, Result};

fn unavailable(message: impl Into<String>) -> Error {
    Error::Unavailable {
        backend: "cuda",
        message: message.into(),
    }
}

fn gpu_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Execution {
        message: format!("cuda: {what}: {e}"),
    }
}

/// `NcclError` implements neither `Display` nor `Error`.
fn nccl_err(what: &str, e: cudarc::nccl::result::NcclError) -> Error {
    Error::Execution {
        message: format!("nccl: {what}: {:?}", e.0),
    }
}
