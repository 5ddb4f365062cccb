//! The times of one training step on its critical device, however they were obtained: the
//! closed form prices a plan into them, the simulator measures them on the device that computes
//! longest. Throughput, MFU and overlap efficiency follow from these (`evaluate::Metrics`).

use serde::Serialize;

/// Times of one step, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StepTimes {
    /// Step time (makespan).
    pub step_time_s: f64,
    /// Compute time on the critical device: the closed form counts kernels at full speed, the
    /// simulator the wall time with a kernel running.
    pub compute_s: f64,
    /// Communication time on the critical device: transfers and collectives in flight,
    /// overlapped or not.
    pub communication_s: f64,
    /// Wall time with communication the compute stream waits for: `step − compute busy` in the
    /// closed form, time with communication in flight and no kernel running in the simulator.
    pub exposed_communication_s: f64,
}
