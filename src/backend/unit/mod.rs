//! A unit run on any backend: what is asked ([`RunSpec`]: the unit, its sizes and options, the
//! inputs' seed, the CPU link throttle) and what comes back ([`RunReport`]: errors against the
//! f64 reference, tracked bytes against the unit inventory, time, per-device details), and what
//! both runtimes share to produce it — the units' algorithms and global inputs ([`attention`],
//! [`mlp`]), the f64 reference ([`reference`](mod@reference)), the deterministic generator
//! ([`rng`]) and the parts of a virtual device ([`device`]); what a run takes on the host,
//! checked before it starts ([`cost`]).
//!
//! The programs that run the units live with their backend: `backend::cpu::units` (threads on
//! the CPU) and `backend::cuda` (the CUDA units, feature `cuda`). Depends on `config` (the
//! unit's description) and `error`; never on a backend (`backend::cpu`, `backend::cuda`), on
//! `calibrate` or on the model layers (`cost`, `sim`).

pub mod attention;
pub mod cost;
pub mod device;
pub mod mlp;
pub mod reference;
pub mod rng;

use std::collections::BTreeMap;

use serde::Serialize;

/// The sizes of a unit, under the name the runtime's callers use ([`crate::config::UnitShape`]).
pub use crate::config::UnitShape as Shape;
pub use crate::config::{ExecMethod, Unit, UnitSpec, WeightExchange};
use device::{CommStats, Link, Mat, StepTime};

/// One run of a unit on the virtual devices: the unit ([`UnitSpec`], which the run
/// dereferences to) and how to run it — the input data's seed and the optional link throttle.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RunSpec {
    /// The unit.
    #[serde(flatten)]
    pub unit_spec: UnitSpec,
    /// Seed of the input data.
    pub seed: u64,
    /// Optional link throttle.
    pub link: Option<Link>,
}

impl std::ops::Deref for RunSpec {
    type Target = UnitSpec;
    fn deref(&self) -> &UnitSpec {
        &self.unit_spec
    }
}

impl std::ops::DerefMut for RunSpec {
    fn deref_mut(&mut self) -> &mut UnitSpec {
        &mut self.unit_spec
    }
}

impl RunSpec {
    /// A run of [`UnitSpec::new`]`(unit, method, shape)` with seed 0 and no throttle.
    pub fn new(unit: Unit, method: ExecMethod, shape: Shape) -> RunSpec {
        RunSpec::of(UnitSpec::new(unit, method, shape))
    }

    /// A run of `unit_spec` with seed 0 and no throttle.
    pub fn of(unit_spec: UnitSpec) -> RunSpec {
        RunSpec {
            unit_spec,
            seed: 0,
            link: None,
        }
    }
}

/// One device's part of a [`RunReport`].
#[derive(Debug, Clone, Serialize)]
pub struct DeviceReport {
    /// Device index.
    pub rank: usize,
    /// High-water mark of its tracked bytes.
    pub peak_bytes: u64,
    /// The driver's high-water mark of the bytes this device's buffers held (CUDA: its own
    /// memory pool's used-memory high-water mark); `None` where there is no such count (CPU,
    /// a GPU without memory pools).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocator_peak_bytes: Option<u64>,
    /// Live bytes per buffer name at that high-water mark.
    pub peak_breakdown: BTreeMap<String, u64>,
    /// Tracked bytes left when its program returned (0 unless a buffer leaked).
    pub end_live_bytes: u64,
    /// METP: this device's peak in the unit inventory (`crate::memory::unit`); None for TP.
    pub inventory_peak_bytes: Option<u64>,
    /// Seconds its program ran.
    pub busy_s: f64,
    /// Communication counters.
    pub comm: CommStats,
    /// Ring-step timestamps (METP only; TP has no ring steps).
    pub steps: Vec<StepTime>,
}

/// A GPU's own view of its memory around a run (the CUDA backend), beside the tracked bytes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuMemory {
    /// Device ordinal.
    pub gpu: usize,
    /// Virtual devices the run placed on it.
    pub virtual_devices: usize,
    /// Bytes in use on the device before the run (`cuMemGetInfo`: total − free; every
    /// process, the CUDA context and the allocator's reserve included).
    pub used_before_bytes: u64,
    /// The same after the run, its buffers freed (the allocator keeps freed memory reserved).
    pub used_after_bytes: u64,
    /// The driver's high-water marks of bytes allocated during the timed run, added up over the
    /// memory pools of its virtual devices (each device's own: [`DeviceReport::allocator_peak_bytes`])
    /// and its default pool (the inputs staged for the run): the allocation granularity,
    /// outputs handed out and messages in flight included. The GPU's joint high-water mark is
    /// at most this (the devices' marks may fall at different moments). `None` without memory
    /// pools.
    pub allocator_high_bytes: Option<u64>,
    /// High-water mark of the tracked bytes of all its virtual devices together.
    pub tracked_high_bytes: u64,
}

/// What a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// The run.
    pub spec: RunSpec,
    /// Largest ‖x − ref‖_F / ‖ref‖_F over `errors`.
    pub max_rel_error: f64,
    /// Relative error of each output and gradient (`out`, `dx`, `dw_qkv`, …).
    pub errors: BTreeMap<String, f64>,
    /// Largest high-water mark over the devices, as the backend measures it: on the CPU the
    /// runtime's own allocations (its tracked buffers: there is no allocator below them to
    /// ask); on CUDA the driver's count, each device's memory pool's used-memory high-water
    /// mark ([`DeviceReport::allocator_peak_bytes`]), or the tracked bytes where the GPU has no
    /// memory pools.
    pub measured_peak_bytes: u64,
    /// Largest high-water mark over the devices of the tracked buffers (the tally of what the
    /// unit's program allocates, by name and dtype, that `memory::unit` predicts byte for
    /// byte); equal to `measured_peak_bytes` on the CPU.
    pub tracked_peak_bytes: u64,
    /// METP: the largest device peak of the unit inventory (`crate::memory::unit`) for the
    /// same unit, sizes and options; None for TP.
    pub inventory_peak_bytes: Option<u64>,
    /// Wall time of the parallel run (threads started to threads joined).
    pub measured_time_s: f64,
    /// Per device.
    pub devices: Vec<DeviceReport>,
    /// The GPUs' own view of their memory (CUDA backend; empty elsewhere).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_memory: Vec<GpuMemory>,
}

/// A matrix of uniform values in [-scale, scale), drawn row by row.
pub(crate) fn random_mat(rows: usize, cols: usize, scale: f64, rng: &mut rng::SplitMix64) -> Mat {
    let mut m = Mat::zeros(rows, cols);
    for r in 0..rows {
        for c in 0..cols {
            m[(r, c)] = (rng.uniform() * scale) as f32;
        }
    }
    m
}

/// Rows of device `i` (sequence block `i` of every sample) from a (b·s) × n matrix.
pub(crate) fn local_rows(m: &Mat, b: usize, s: usize, p: usize, i: usize) -> Mat {
    let c = s / p;
    let mut out = Mat::zeros(b * c, m.ncols());
    for beta in 0..b {
        out.rows_mut(beta * c, c)
            .copy_from(&m.rows(beta * s + i * c, c));
    }
    out
}

/// The inverse of [`local_rows`]: the (b·s) × n matrix from every device's rows.
pub(crate) fn gather_rows(parts: &[&Mat], b: usize, s: usize) -> Mat {
    let p = parts.len();
    let c = s / p;
    let n = parts.first().map(|m| m.ncols()).unwrap_or(0);
    let mut out = Mat::zeros(b * s, n);
    for (i, part) in parts.iter().enumerate() {
        for beta in 0..b {
            out.rows_mut(beta * s + i * c, c)
                .copy_from(&part.rows(beta * c, c));
        }
    }
    out
}
