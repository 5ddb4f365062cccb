//! A workload's step plan through the simulator: lowered with the memory inventory's alloc/free
//! sizes over the workload's p × dp devices, then simulated.

use super::{simulate, DeviceStats, LinkModel, SimOptions, SimResult};
use crate::config::ValidWorkload;
use crate::error::Result;
use crate::memory::Inventory;
use crate::schedule::{self, LowerOptions, StepPlan, StepTimes};

/// The outcome of simulating a workload's step.
#[derive(Debug, Clone)]
pub struct WorkloadSim {
    /// The simulator's result.
    pub result: SimResult,
    /// Devices simulated (p × dp).
    pub devices: u32,
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

    /// The step's times on the critical device.
    pub fn times(&self) -> StepTimes {
        let c = self.critical();
        StepTimes {
            step_time_s: self.result.step_time_s,
            compute_s: c.compute_busy_s,
            communication_s: c.comm_busy_s,
            exposed_communication_s: c.exposed_comm_s,
        }
    }
}

/// Simulates one training step of `w` from its plan and inventory (built once by the caller).
pub fn simulate_plan(
    w: &ValidWorkload,
    plan: &StepPlan,
    inventory: &Inventory,
    link: LinkModel,
    trace: bool,
) -> Result<WorkloadSim> {
    let graph = schedule::lower(
        plan,
        w.p as u32,
        inventory,
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
    })
}
