//! A workload through the simulator: its plan, lowered with the memory inventory's alloc/free
//! sizes over p × dp devices, then simulated.

use super::{simulate, DeviceStats, LinkModel, SimOptions, SimResult};
use crate::config::Workload;
use crate::error::Result;
use crate::memory;
use crate::schedule::{self, LowerOptions};

/// The outcome of simulating a workload.
#[derive(Debug, Clone)]
pub struct WorkloadSim {
    /// The simulator's result.
    pub result: SimResult,
    /// Devices simulated (p × dp).
    pub devices: u32,
    /// The memory inventory's peak per device.
    pub inventory_peak_bytes: u128,
}

impl WorkloadSim {
    /// The critical device: the one that computes longest (it sets the step's pace); ties go to
    /// the lower device id.
    pub fn critical(&self) -> &DeviceStats {
        let mut best = &self.result.devices[0];
        for d in &self.result.devices[1..] {
            if d.compute_busy_s > best.compute_busy_s {
                best = d;
            }
        }
        best
    }
}

/// Simulates one training step of `w`.
pub fn simulate_workload(w: &Workload, link: LinkModel, trace: bool) -> Result<WorkloadSim> {
    let inv = memory::inventory(w)?;
    let plan = schedule::plan(w)?;
    let graph = schedule::lower(
        &plan,
        w.p as u32,
        &inv,
        LowerOptions {
            dp: w.dp as u32,
            memory: true,
            optimizer: true,
        },
    );
    let result = simulate(&graph, &w.hardware, link, SimOptions { trace })?;
    Ok(WorkloadSim {
        result,
        devices: graph.devices,
        inventory_peak_bytes: inv.peak_bytes,
    })
}
