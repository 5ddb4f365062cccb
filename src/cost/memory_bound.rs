//! Memory-bound kernels (copies, element-wise passes, norms, softmax, optimizer): bytes moved
//! at the device's memory bandwidth after a fixed device latency (DESIGN §4):
//!
//! ```text
//! device = kernels.memory.latency_s + bytes / gpu.hbm_bytes_per_s
//! ```
//!
//! `bytes` counts what is read plus what is written (a copy of an N-byte buffer moves 2N).

use crate::config::Hardware;

/// Device seconds of a memory-bound kernel moving `bytes`.
pub fn device_s(hw: &Hardware, bytes: f64) -> f64 {
    hw.kernels.memory.latency_s.value + bytes / hw.gpu.hbm_bytes_per_s.value
}
