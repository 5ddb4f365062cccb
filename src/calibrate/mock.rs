//! A deterministic backend for tests: every measurement is the exact time a known profile
//! (`truth`) gives, so fitting must recover the profile's figures exactly, and a unit's
//! "measured" time is the prediction from the truth. A failure can be injected after a number
//! of measurements.

use std::collections::BTreeMap;

use super::backend::{AttnBlock, AttnCall, Backend, GemmShape, Pass, SlowdownSample};
use super::measure::Plan;
use super::predict::{predict, PredictOptions, Pricer, Work};
use crate::config::{Hardware, WeightExchange};
use crate::error::{Error, Result};
use crate::exec::{DeviceReport, ExecMethod, RunReport, RunSpec, Shape, Unit};

/// The mock backend.
#[derive(Debug, Clone)]
pub struct MockBackend {
    /// The profile the synthetic numbers come from.
    pub truth: Hardware,
    /// Fail the measurement with this index (0-based), if set.
    pub fail_at: Option<usize>,
    calls: usize,
}

/// Alone time of the slowdown GEMM (any value; only the ratio matters).
const SLOW_ALONE_S: f64 = 1e-3;

impl MockBackend {
    /// A mock whose measurements follow `truth`.
    pub fn new(truth: Hardware) -> MockBackend {
        MockBackend {
            truth,
            fail_at: None,
            calls: 0,
        }
    }

    fn tick(&mut self) -> Result<()> {
        let n = self.calls;
        self.calls += 1;
        if self.fail_at == Some(n) {
            return Err(Error::Calibration {
                message: format!("mock backend: failure injected at measurement {n}"),
            });
        }
        Ok(())
    }

    fn pricer(&self) -> Pricer<'_> {
        Pricer::new(&self.truth, PredictOptions::default())
    }

    /// A plan whose sizes are exactly the truth's table points (GEMMs `n×n×n` with
    /// 2n³ = size; attention blocks b = heads = 1, d = 8, forward 32·c² and backward 80·c²),
    /// so that the fit can recover them, plus one METP attention and one MLP unit.
    pub fn plan(&self) -> Plan {
        let shape = Shape {
            b: 1,
            s: 64,
            h: 32,
            a: 4,
            f: 128,
            p: 2,
        };
        let mut att = RunSpec::new(Unit::Attention, ExecMethod::Metp, shape);
        att.weight_exchange = WeightExchange::Broadcast;
        Plan {
            gemms: [8, 32, 128].map(|n| GemmShape::new(n, n, n)).to_vec(),
            attention: [16, 64]
                .map(|c| AttnBlock {
                    b: 1,
                    c,
                    heads: 1,
                    d: 8,
                })
                .to_vec(),
            elementwise_bytes: vec![4096, 65536, 1 << 20],
            copy_bytes: vec![1 << 20],
            transfer_bytes: vec![1024, 16384, 1 << 20],
            slowdown: (GemmShape::new(32, 32, 32), 4096, 3),
            units: vec![att, RunSpec::new(Unit::Mlp, ExecMethod::Metp, shape)],
        }
    }

    /// A truth profile whose table points sit exactly at [`MockBackend::plan`]'s sizes, with
    /// the best GEMM at fraction 1 (so the fitted peak is the true peak).
    pub fn truth_profile() -> Hardware {
        let mut hw = crate::config::load_hardware("dgx-a100-80gb").unwrap_or_else(|_| {
            unreachable!("the bundled dgx-a100-80gb profile is part of the crate's data")
        });
        hw.gpu.peak_bf16_flops_per_s.value = 2.0e10;
        hw.gpu.hbm_bytes_per_s.value = 8.0e9;
        hw.gpu.kernel_launch_s.value = 0.0;
        hw.efficiency.gemm.points = vec![(1024.0, 0.25), (65536.0, 0.625), (4194304.0, 1.0)];
        hw.efficiency.attention.points = vec![
            (8192.0, 0.125),
            (20480.0, 0.1875),
            (131072.0, 0.5),
            (327680.0, 0.4375),
        ];
        hw.efficiency.elementwise.points = vec![(4096.0, 0.25), (65536.0, 0.375), (1048576.0, 0.5)];
        hw.intra_node.bytes_per_s_per_direction.value = 1.5e9;
        hw.intra_node.p2p_latency_s.value = 2.5e-5;
        hw.overlap_compute_slowdown_fraction.value = 0.125;
        hw.gpus_per_node = 2;
        hw
    }
}

impl Backend for MockBackend {
    fn name(&self) -> &'static str {
        "mock"
    }
    fn device(&self) -> String {
        format!("mock device following profile '{}'", self.truth.name)
    }
    fn devices(&self) -> usize {
        self.truth.gpus_per_node as usize
    }
    fn memory_bytes(&self) -> u64 {
        self.truth.gpu.memory_bytes.value as u64
    }
    fn gemm_s(&mut self, g: GemmShape) -> Result<f64> {
        self.tick()?;
        Ok(self.pricer().work_s(Work::Gemm(g)))
    }
    fn attention_s(&mut self, call: AttnCall, pass: Pass) -> Result<f64> {
        self.tick()?;
        // Priced as the square block of the same queries, scaled to the call's visible pairs.
        let b = AttnBlock {
            b: call.batch,
            c: call.q_tokens,
            heads: call.heads,
            d: call.head_dim,
        };
        let scale = call.forward_flops() / b.forward_flops();
        Ok(self.pricer().work_s(Work::Attention(b, pass)) * scale)
    }
    fn elementwise_s(&mut self, bytes: u64) -> Result<f64> {
        self.tick()?;
        Ok(self.pricer().work_s(Work::Elementwise(bytes)))
    }
    fn copy_s(&mut self, bytes: u64) -> Result<f64> {
        self.tick()?;
        Ok(self.pricer().work_s(Work::Copy(bytes)))
    }
    fn transfer_s(&mut self, bytes: u64) -> Result<f64> {
        self.tick()?;
        Ok(self.pricer().message_s(bytes))
    }
    fn slowdown(&mut self, _g: GemmShape, _bytes: u64) -> Result<SlowdownSample> {
        self.tick()?;
        Ok(SlowdownSample {
            alone_s: SLOW_ALONE_S,
            with_transfer_s: SLOW_ALONE_S
                * (1.0 + self.truth.overlap_compute_slowdown_fraction.value),
        })
    }
    fn run_unit(&mut self, spec: &RunSpec) -> Result<RunReport> {
        self.tick()?;
        let pred = predict(spec, &self.truth, PredictOptions::default());
        let devices = (0..spec.shape.p)
            .map(|rank| DeviceReport {
                rank,
                peak_bytes: 0,
                peak_breakdown: BTreeMap::new(),
                end_live_bytes: 0,
                inventory_peak_bytes: None,
                busy_s: pred.time_s,
                comm: Default::default(),
                steps: if rank == pred.critical_device {
                    let mut t = 0.0;
                    pred.steps
                        .iter()
                        .map(|s| {
                            let st = crate::exec::device::StepTime {
                                phase: s.phase,
                                group: s.group,
                                step: s.step,
                                start_s: t,
                                compute_end_s: t + s.compute_s,
                                end_s: t + s.duration_s,
                            };
                            t += s.duration_s;
                            st
                        })
                        .collect()
                } else {
                    vec![]
                },
            })
            .collect();
        Ok(RunReport {
            spec: *spec,
            max_rel_error: 0.0,
            errors: BTreeMap::new(),
            measured_peak_bytes: 0,
            inventory_peak_bytes: None,
            measured_time_s: pred.time_s,
            devices,
            gpu_memory: vec![],
        })
    }
}
