//! A deterministic backend for tests: every kernel measurement is the exact device time a known
//! profile (`truth`) gives, messages `α + n/B` and the slowdown `(1 + σ)·t`, so fitting must
//! recover the profile's figures, and a unit's "measured" time is the prediction from the
//! truth. A failure can be injected after a number of measurements.

use std::collections::BTreeMap;

use super::predict::{predict, PredictOptions, Pricer, Work};
use super::{AttnCall, Backend, GemmShape, Pass, SlowdownSample, Timing};
use crate::backend::unit::{DeviceReport, RunReport, RunSpec};
use crate::config::{Hardware, UnitSupport};
use crate::cost::CostModel;
use crate::error::{Error, Result};

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

    /// A truth profile with the CPU backend's structure (one "SM", 8-wide tiles and blocks;
    /// `profile::backend_base`) and its own rates and fixed times.
    pub fn truth_profile() -> Hardware {
        let mut hw = crate::config::load_hardware("dgx-a100-80gb").unwrap_or_else(|_| {
            unreachable!("the bundled dgx-a100-80gb profile is part of the crate's data")
        });
        hw.gpu.peak_bf16_flops_per_s.value = 2.0e10;
        hw.gpu.hbm_bytes_per_s.value = 8.0e9;
        hw.gpu.sm_count.value = 1.0;
        let k = &mut hw.kernels;
        k.host.op_s.value = 0.0;
        k.host.isolated_gap_s.value = 0.0;
        k.host.isolated_floor_s.value = 0.0;
        k.memory.latency_s.value = 4e-7;
        k.memory.elementwise_fraction.value = 0.4;
        k.gemm.tile.value = 8.0;
        k.gemm.k_step.value = 8.0;
        k.gemm.mma_fraction.value = 0.6;
        k.gemm.tile_s.value = 2e-7;
        k.gemm.call_s.value = 3e-6;
        for (a, mma, tile_s, call_s) in [
            (&mut k.attention_fwd, 0.3, 1.5e-7, 2e-6),
            (&mut k.attention_bwd, 0.25, 3e-7, 4e-6),
        ] {
            a.block_q.value = 8.0;
            a.block_k.value = 8.0;
            a.ctas_per_sm.value = 1.0;
            a.mma_fraction.value = mma;
            a.tile_s.value = tile_s;
            a.call_s.value = call_s;
            a.extra_bytes_per_element.value = 0.0;
            a.isolated_extra_s.value = 0.0;
        }
        hw.intra_node.bytes_per_s_per_direction.value = 1.5e9;
        hw.intra_node.p2p_latency_s.value = 2.5e-5;
        hw.overlap_compute_slowdown_fraction.value = 0.125;
        hw.gpus_per_node = 2;
        hw
    }

    fn device_s(&self, shape: crate::schedule::KernelShape) -> f64 {
        CostModel::new(&self.truth).device_s(&shape)
    }
}

impl Backend for MockBackend {
    fn name(&self) -> &'static str {
        "mock"
    }
    /// The CPU runtime's: a mock unit is the prediction of the CPU runtime's program.
    fn support(&self) -> UnitSupport {
        crate::backend::cpu::units::SUPPORT
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
    fn timing(&self) -> Timing {
        Timing::Device
    }
    fn gemm_s(&mut self, g: GemmShape) -> Result<f64> {
        self.tick()?;
        Ok(self.device_s(Work::Gemm(g).shape()))
    }
    fn attention_s(&mut self, a: AttnCall, pass: Pass) -> Result<f64> {
        self.tick()?;
        Ok(self.device_s(Work::Attention(a, pass).shape()))
    }
    fn elementwise_s(&mut self, bytes: u64) -> Result<f64> {
        self.tick()?;
        // The file records the buffer (half the bytes moved): keep the round trip exact.
        Ok(self.device_s(Work::Elementwise(bytes / 2 * 2).shape()))
    }
    fn copy_s(&mut self, bytes: u64) -> Result<f64> {
        self.tick()?;
        Ok(self.device_s(Work::Copy(bytes / 2 * 2).shape()))
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
                allocator_peak_bytes: None,
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
                            let st = crate::backend::unit::device::StepTime {
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
            tracked_peak_bytes: 0,
            inventory_peak_bytes: None,
            measured_time_s: pred.time_s,
            devices,
            gpu_memory: vec![],
        })
    }
}
