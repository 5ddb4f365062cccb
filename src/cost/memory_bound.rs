//! Memory-bound kernels (copies, element-wise passes, norms, softmax, optimizer): bytes moved
//! at the device's memory bandwidth after a fixed device latency (DESIGN §4):
//!
//! ```text
//! copy        = kernels.memory.latency_s + bytes / gpu.hbm_bytes_per_s
//! element-wise = kernels.memory.latency_s + bytes / (gpu.hbm_bytes_per_s · elementwise_fraction)
//! ```
//!
//! `bytes` counts what is read plus what is written (a copy of an N-byte buffer moves 2N). On a
//! GPU an element-wise pass runs at the copy rate (the H200 fit gives a fraction near 1); on the
//! CPU backend a GeLU is bound by its arithmetic, far below the copy rate.

use crate::config::Hardware;

/// Device seconds of a copy moving `bytes`.
pub fn copy_s(hw: &Hardware, bytes: f64) -> f64 {
    hw.kernels.memory.latency_s.value + bytes / hw.gpu.hbm_bytes_per_s.value
}

/// Device seconds of an element-wise pass moving `bytes`.
pub fn elementwise_s(hw: &Hardware, bytes: f64) -> f64 {
    let m = &hw.kernels.memory;
    m.latency_s.value + bytes / (hw.gpu.hbm_bytes_per_s.value * m.elementwise_fraction.value)
}
