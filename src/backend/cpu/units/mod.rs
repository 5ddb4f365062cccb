//! Executes METP's computing units for real on p virtual devices, checks them against an f64
//! reference, and measures the bytes each device holds.
//!
//! Input: a [`RunSpec`] — unit (attention or MLP), method (METP or Megatron TP), shapes
//! (b, s, h, a, f, p), causal / fused / receive buffers / weight exchange, a seed and an
//! optional CPU link throttle. Output: a [`RunReport`] with `max_rel_error` (largest
//! ‖out − ref‖_F / ‖ref‖_F over the unit's output, input gradient and weight gradients),
//! `measured_peak_bytes` (the largest high-water mark over the devices, counted by tracked
//! allocations in the modelled dtypes), `inventory_peak_bytes` (METP: the peak of the memory
//! layer's unit inventory, [`crate::memory::unit`], for the same unit, sizes and options),
//! `measured_time_s` and per-device details (each with its measured and inventory peak).
//!
//! - [`device`]: a virtual device is one OS thread; point-to-point channels; [`device::Tracked`]
//!   buffers feed a per-device live-bytes counter; posted receives hold their buffer; optional
//!   bandwidth/latency throttle.
//! - [`attention`]: METP's two-level loop (head groups outer, ring over sequence blocks inner),
//!   fused (online softmax, per-head tiles only) or unfused (one block of scores and
//!   probabilities materialised), causal or not, weights by broadcast or ring relay, single or
//!   double buffered; backward with traveling fp32 dK/dV and weight gradients reduced to the
//!   shard owner. Plus Megatron TP (heads split, activations replicated, ring all-reduce).
//! - [`mlp`]: METP's one-level ring of (W1\[j\], W2\[j\]) shard pairs with traveling fp32 gradient
//!   accumulators in backward; tanh-approximation GeLU. Plus Megatron TP.
//! - [`reference`](mod@reference): the f64 single-device reference.
//!
//! Everything is deterministic for a seed except the timings. Depends on `config` (for
//! [`WeightExchange`]), `memory` (the unit inventory it reports next to its measurement) and
//! `error`; never on `cli`.
//!
//! # Runtime bytes against the inventory
//!
//! The memory layer's unit inventory ([`crate::memory::unit`]) is the one source of the
//! expected bytes: it lists, for every moment of a METP unit, the tensors one device holds,
//! under the names the runtime's tracked buffers carry. The tests check, for every device of
//! every run (p = 1…8, causal or not, fused or unfused, one or two receive buffers, ring or
//! broadcast), that the measured high-water mark equals the inventory's peak of that device
//! byte for byte and that the breakdown by name at the high-water mark is the inventory's
//! peak moment. The layer inventory ([`crate::memory::inventory`]) takes its METP transients,
//! phase by phase, from the same unit inventory (the moment with the most transient bytes),
//! so the runtime, the unit inventory and the layer inventory agree on every transient tensor
//! (test `exec_reconcile_with_inventory`). What remains different between a one-layer run and
//! the layer inventory is by construction: the layer counts stored activations whole, for
//! every layer, in every phase (the runtime's stored O and log-sum-exp grow group by group in
//! forward), and its static part holds every layer's weights and optimizer state.

pub mod attention;
pub mod mlp;
pub mod reference;
pub mod rng;

use std::collections::BTreeMap;

use serde::Serialize;

use super::device;
/// The sizes of a unit, under the name the runtime's callers use ([`crate::config::UnitShape`]).
pub use crate::config::UnitShape as Shape;
use crate::config::UnitSupport;
pub use crate::config::{ExecMethod, Unit, UnitSpec, WeightExchange};
use crate::error::{Error, Result};
use crate::memory::unit::unit_inventory;
use device::{CommStats, DeviceRun, Link, Mat, StepTime};
use reference::M64;

/// Largest element count of one global tensor (or of all the attention blocks of one device)
/// a run accepts: runs are checks, not benchmarks of huge shapes.
const MAX_ELEMENTS: usize = 1 << 26;
/// Most virtual devices (threads).
const MAX_DEVICES: usize = 256;

/// What this runtime honours of a [`UnitSpec`]: everything but the options its programs do
/// not implement — head groups other than p, stored Q/K/V or MLP activation input, grouped-query
/// attention and SwiGLU (its units are multi-head attention and a GeLU MLP).
pub const SUPPORT: UnitSupport = UnitSupport {
    head_groups: false,
    store_qkv: false,
    store_mlp_act: false,
    grouped_kv: false,
    activations: &[crate::config::Activation::Gelu],
    ..UnitSupport::ALL
};

/// `Err` unless the runtime can hold `shape` for `unit`: at most [`MAX_DEVICES`] devices and
/// [`MAX_ELEMENTS`] elements per global tensor (and per device's attention blocks).
fn check_size(unit: Unit, method: ExecMethod, shape: &Shape) -> Result<()> {
    let err = |message: String| Error::InvalidConfig {
        method: method.id().to_string(),
        p: shape.p as u64,
        message,
    };
    let Shape { b, s, h, a, f, p } = *shape;
    if p > MAX_DEVICES {
        return Err(err(format!("at most {MAX_DEVICES} virtual devices")));
    }
    let big = |what: &str, n: Option<usize>| match n {
        Some(n) if n <= MAX_ELEMENTS => Ok(()),
        _ => Err(err(format!(
            "{what} exceeds {MAX_ELEMENTS} elements; use smaller shapes"
        ))),
    };
    big("b·s·h", b.checked_mul(s).and_then(|x| x.checked_mul(h)))?;
    match unit {
        Unit::Attention => {
            big("h·3h", h.checked_mul(3 * h))?;
            // Attention blocks one device materialises (TP: a/p heads × s × s).
            big(
                "the attention scores of one device",
                b.checked_mul(a / p.max(1))
                    .and_then(|x| x.checked_mul(s))
                    .and_then(|x| x.checked_mul(s)),
            )
        }
        Unit::Mlp => {
            big("h·f", h.checked_mul(f))?;
            big("b·s·f", b.checked_mul(s).and_then(|x| x.checked_mul(f)))
        }
    }
}

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

    /// `Err` unless the unit is valid, this runtime honours its options and holds its sizes,
    /// and the throttle is physical.
    fn check_runtime(&self) -> Result<()> {
        self.unit_spec.check()?;
        SUPPORT.check("cpu", &self.unit_spec)?;
        check_size(self.unit, self.method, &self.shape)?;
        if let Some(l) = self.link {
            let bandwidth_ok = l.bandwidth_bytes_per_s.is_finite() && l.bandwidth_bytes_per_s > 0.0;
            let latency_ok = l.latency_s.is_finite() && l.latency_s >= 0.0;
            if !(bandwidth_ok && latency_ok) {
                return Err(Error::arg(
                    "--link",
                    "bandwidth must be positive and latency non-negative",
                ));
            }
        }
        Ok(())
    }
}

/// One device's part of a [`RunReport`].
#[derive(Debug, Clone, Serialize)]
pub struct DeviceReport {
    /// Device index.
    pub rank: usize,
    /// High-water mark of its tracked bytes.
    pub peak_bytes: u64,
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
    /// The stream-ordered allocator's high-water mark of bytes allocated during the timed run
    /// (the driver's count: allocation granularity, inputs staged for the run, outputs handed
    /// out and messages in flight included); `None` without memory pools.
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
    /// Largest high-water mark over the devices.
    pub measured_peak_bytes: u64,
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

/// Runs one unit forward and backward on `spec.shape.p` virtual devices in f32, checks every
/// output and gradient against the f64 reference, and reports errors, memory and time.
pub fn run_unit(spec: &RunSpec) -> Result<RunReport> {
    spec.check_runtime()?;
    let sh = spec.shape;
    let mut rng = rng::SplitMix64::new(spec.seed);
    let (errors, runs, wall) = match spec.unit {
        Unit::Attention => {
            let data = attention::AttnData::random(&sh, &mut rng);
            let cfg = attention::AttnCfg::from_spec(spec);
            let (runs, wall) = match spec.method {
                ExecMethod::Metp => {
                    device::run_devices(sh.p, spec.link, |dev| attention::metp(dev, &cfg, &data))?
                }
                ExecMethod::Tp => {
                    device::run_devices(sh.p, spec.link, |dev| attention::tp(dev, &cfg, &data))?
                }
            };
            let outs: Vec<&attention::AttnOut> = runs.iter().map(|r| &r.output).collect();
            let got = attention::assemble(&cfg, spec.method, &outs);
            let r = reference::attention(
                &to64(&data.x),
                &to64(&data.wqkv),
                &to64(&data.wo),
                &to64(&data.dout),
                sh.b,
                sh.a,
                spec.causal,
            );
            let errors = BTreeMap::from([
                ("out".to_string(), rel_error(&got.out, &r.out)),
                ("dx".to_string(), rel_error(&got.dx, &r.dx)),
                ("dw_qkv".to_string(), rel_error(&got.dwqkv, &r.dwqkv)),
                ("dw_o".to_string(), rel_error(&got.dwo, &r.dwo)),
            ]);
            (
                errors,
                runs.into_iter().enumerate().map(strip).collect::<Vec<_>>(),
                wall,
            )
        }
        Unit::Mlp => {
            let data = mlp::MlpData::random(&sh, &mut rng);
            let cfg = mlp::MlpCfg::from_spec(spec);
            let (runs, wall) = match spec.method {
                ExecMethod::Metp => {
                    device::run_devices(sh.p, spec.link, |dev| mlp::metp(dev, &cfg, &data))?
                }
                ExecMethod::Tp => {
                    device::run_devices(sh.p, spec.link, |dev| mlp::tp(dev, &cfg, &data))?
                }
            };
            let outs: Vec<&mlp::MlpOut> = runs.iter().map(|r| &r.output).collect();
            let got = mlp::assemble(&cfg, spec.method, &outs);
            let r = reference::mlp(
                &to64(&data.x),
                &to64(&data.w1),
                &to64(&data.w2),
                &to64(&data.dout),
            );
            let errors = BTreeMap::from([
                ("out".to_string(), rel_error(&got.out, &r.out)),
                ("dx".to_string(), rel_error(&got.dx, &r.dx)),
                ("dw1".to_string(), rel_error(&got.dw1, &r.dw1)),
                ("dw2".to_string(), rel_error(&got.dw2, &r.dw2)),
            ]);
            (
                errors,
                runs.into_iter().enumerate().map(strip).collect::<Vec<_>>(),
                wall,
            )
        }
    };
    let mut devices: Vec<DeviceReport> = runs;
    let mut inventory_peak_bytes = None;
    if spec.method == ExecMethod::Metp {
        let inv = unit_inventory(&spec.unit_spec).map_err(|message| Error::InvalidConfig {
            method: spec.method.id().to_string(),
            p: sh.p as u64,
            message,
        })?;
        for d in &mut devices {
            d.inventory_peak_bytes = Some(inv.device_peak_bytes(d.rank as u64) as u64);
        }
        inventory_peak_bytes = Some(inv.peak_bytes as u64);
    }
    let max_rel_error = errors.values().cloned().fold(0.0, f64::max);
    Ok(RunReport {
        spec: *spec,
        max_rel_error,
        errors,
        measured_peak_bytes: devices.iter().map(|d| d.peak_bytes).max().unwrap_or(0),
        inventory_peak_bytes,
        measured_time_s: wall,
        devices,
        gpu_memory: vec![],
    })
}

fn strip<T>((rank, r): (usize, DeviceRun<T>)) -> DeviceReport {
    DeviceReport {
        rank,
        peak_bytes: r.mem.peak_bytes,
        peak_breakdown: r.mem.peak_breakdown,
        end_live_bytes: r.mem.end_live_bytes,
        inventory_peak_bytes: None,
        busy_s: r.busy_s,
        comm: r.comm,
        steps: r.steps,
    }
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

/// The f64 copy of an f32 matrix (exactly the same values).
pub(crate) fn to64(m: &Mat) -> M64 {
    m.map(|x| x as f64)
}

/// ‖got − want‖_F / ‖want‖_F in f64 (‖got‖_F when `want` is zero; infinite on a shape
/// mismatch or a non-finite value).
pub fn rel_error(got: &Mat, want: &M64) -> f64 {
    if got.shape() != want.shape() {
        return f64::INFINITY;
    }
    let diff: f64 = got
        .iter()
        .zip(want.iter())
        .map(|(&g, &w)| (g as f64 - w).powi(2))
        .sum::<f64>()
        .sqrt();
    let norm = want.norm();
    let e = if norm > 0.0 { diff / norm } else { diff };
    if e.is_nan() {
        f64::INFINITY
    } else {
        e
    }
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

#[cfg(test)]
mod tests;
