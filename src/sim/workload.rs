//! A workload's step plan through the simulator: lowered with its stages' memory inventories
//! over the workload's devices (one per distinct program by default), then simulated.

use serde::Serialize;

use super::{simulate, DeviceStats, LinkModel, SimOptions, SimResult};
use crate::config::{Coord, ValidWorkload};
use crate::error::Result;
use crate::memory::Inventory;
use crate::schedule::{self, Devices, LowerOptions, StepPlan, StepTimes};

/// The outcome of simulating a workload's step.
#[derive(Debug, Clone)]
pub struct WorkloadSim {
    /// The simulator's result.
    pub result: SimResult,
    /// Devices simulated.
    pub devices: u32,
    /// Devices of the cluster they stand for (p · cp · dp · pp).
    pub cluster_devices: u32,
    /// Coordinates of each simulated device.
    pub coords: Vec<Coord>,
    /// How many cluster devices each simulated device stands for.
    pub stands_for: Vec<u32>,
}

/// One pipeline stage of a simulated step, on its busiest simulated device.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StageTimes {
    /// Stage.
    pub stage: u32,
    /// Wall time with a kernel running.
    pub compute_s: f64,
    /// Communication time (in flight, overlapped or not).
    pub communication_s: f64,
    /// Communication the compute stream waited for.
    pub exposed_communication_s: f64,
    /// Idle time: neither computing nor waiting on its own communication (the pipeline
    /// bubble, and waiting for other stages): step − compute − exposed.
    pub bubble_s: f64,
    /// The memory high-water mark of the lowered graph's alloc/free tasks.
    pub memory_high_water_bytes: u128,
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

    /// Per pipeline stage, its busiest simulated device's times.
    pub fn stages(&self) -> Vec<StageTimes> {
        let stages = self.coords.iter().map(|c| c.stage + 1).max().unwrap_or(1);
        (0..stages)
            .filter_map(|s| {
                let d = (0..self.coords.len())
                    .filter(|&i| self.coords[i].stage == s)
                    .max_by(|&a, &b| {
                        let (x, y) = (&self.result.devices[a], &self.result.devices[b]);
                        x.compute_busy_s
                            .total_cmp(&y.compute_busy_s)
                            .then_with(|| b.cmp(&a))
                    })?;
                let dev = &self.result.devices[d];
                Some(StageTimes {
                    stage: s,
                    compute_s: dev.compute_busy_s,
                    communication_s: dev.comm_busy_s,
                    exposed_communication_s: dev.exposed_comm_s,
                    bubble_s: (self.result.step_time_s - dev.compute_busy_s - dev.exposed_comm_s)
                        .max(0.0),
                    memory_high_water_bytes: self
                        .coords
                        .iter()
                        .zip(&self.result.devices)
                        .filter(|(c, _)| c.stage == s)
                        .map(|(_, d)| d.memory_high_water_bytes)
                        .max()
                        .unwrap_or(0),
                })
            })
            .collect()
    }

    /// A name for each simulated device: its stage (with a pipeline), context-parallel rank,
    /// method rank and replica, and how many cluster devices it stands for.
    pub fn device_names(&self, pipelined: bool, context: bool) -> Vec<String> {
        self.coords
            .iter()
            .zip(&self.stands_for)
            .map(|(c, &n)| {
                let mut s = String::new();
                if pipelined {
                    s.push_str(&format!("stage {} · ", c.stage));
                }
                if context {
                    s.push_str(&format!("cp {} · ", c.cp));
                }
                s.push_str(&format!("rank {} · replica {}", c.rank, c.replica));
                if n > 1 {
                    s.push_str(&format!(" (stands for {n} devices)"));
                }
                s
            })
            .collect()
    }
}

/// Simulates one training step of `w` from its plan and its stages' inventories (built once by
/// the caller), on one device per distinct program ([`Devices::Distinct`]) or on all of them.
pub fn simulate_plan(
    w: &ValidWorkload,
    plan: &StepPlan,
    stages: &[Inventory],
    link: LinkModel,
    trace: bool,
    devices: Devices,
) -> Result<WorkloadSim> {
    let graph = schedule::lower(
        w,
        plan,
        stages,
        LowerOptions {
            devices,
            ..LowerOptions::step()
        },
    );
    let mut result = simulate(&graph, &w.hardware, link, SimOptions { trace })?;
    let axes = w.axes();
    let coords: Vec<Coord> = (0..graph.devices)
        .map(|d| axes.coord_of(graph.rank_of(d)))
        .collect();
    let mut stands_for = vec![0u32; graph.devices as usize];
    for r in 0..graph.cluster_devices() {
        if let Some(d) = graph.device_of(r) {
            stands_for[d as usize] += 1;
        }
    }
    let trace = result.trace.take();
    let mut out = WorkloadSim {
        devices: graph.devices,
        cluster_devices: graph.cluster_devices(),
        coords,
        stands_for,
        result,
    };
    if let Some(mut t) = trace {
        t.devices = out.device_names(w.outer.pp > 1, w.outer.cp > 1);
        out.result.trace = Some(t);
    }
    Ok(out)
}
