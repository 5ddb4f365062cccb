//! The CPU runtime: executes METP's and Megatron TP's units for real on p virtual CPU devices
//! (threads, `backend::cpu::device`), checks them against the f64 reference, and measures the
//! bytes each device holds ([`run_unit`]; what it honours of a unit: [`SUPPORT`]).
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
//! - [`attention`]: the attention unit's programs (METP's two-level loop, Megatron TP) over the
//!   block kernels of `attention/block.rs`;
//! - [`mlp`]: the MLP unit's programs (METP's one-level ring of shard pairs, Megatron TP).
//!
//! The algorithms they follow, their inputs, the f64 reference and the assembly of the devices'
//! results are the backends' shared `backend::unit` (the CUDA units follow the same ones).
//! Everything is deterministic for a seed except the timings. Depends on `backend::unit`,
//! `backend::cpu::device`, `config`, `memory` (the unit inventory it reports next to its
//! measurement) and `error`; never on `backend::cuda`, `calibrate` or `cli`.
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

use std::collections::BTreeMap;

use super::device;
use crate::backend::unit::reference::{rel_error, to64};
use crate::backend::unit::{
    self, reference, rng, DeviceReport, ExecMethod, RunReport, RunSpec, Shape, Unit,
};
use crate::config::UnitSupport;
use crate::error::{Error, Result};
use crate::memory::unit::unit_inventory;
use device::DeviceRun;

/// Largest element count of one global tensor (or of all the attention blocks of one device)
/// a run accepts: runs are checks, not benchmarks of huge shapes.
const MAX_ELEMENTS: usize = 1 << 26;
/// Most virtual devices (threads).
const MAX_DEVICES: usize = 256;

/// What this runtime honours of a [`UnitSpec`](crate::config::UnitSpec): everything but the options its programs do
/// not implement — head groups other than p and stored Q/K/V or MLP activation input (its
/// attention is multi-head or grouped-query, its MLP GeLU or SwiGLU).
pub const SUPPORT: UnitSupport = UnitSupport {
    head_groups: false,
    store_qkv: false,
    store_mlp_act: false,
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

/// `Err` unless the unit is valid, this runtime honours its options and holds its sizes, and
/// the throttle is physical.
fn check_runtime(spec: &RunSpec) -> Result<()> {
    spec.unit_spec.check()?;
    SUPPORT.check("cpu", &spec.unit_spec)?;
    check_size(spec.unit, spec.method, &spec.shape)?;
    if let Some(l) = spec.link {
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

/// Runs one unit forward and backward on `spec.shape.p` virtual devices in f32, checks every
/// output and gradient against the f64 reference, and reports errors, memory and time.
pub fn run_unit(spec: &RunSpec) -> Result<RunReport> {
    check_runtime(spec)?;
    let sh = spec.shape;
    let mut rng = rng::SplitMix64::new(spec.seed);
    let (errors, runs, wall) = match spec.unit {
        Unit::Attention => {
            let data = unit::attention::AttnData::random(&sh, spec.kv_heads, &mut rng);
            let cfg = unit::attention::AttnCfg::from_spec(spec);
            let (runs, wall) = match spec.method {
                ExecMethod::Metp => {
                    device::run_devices(sh.p, spec.link, |dev| attention::metp(dev, &cfg, &data))?
                }
                ExecMethod::Tp => {
                    device::run_devices(sh.p, spec.link, |dev| attention::tp(dev, &cfg, &data))?
                }
            };
            let outs: Vec<&unit::attention::AttnOut> = runs.iter().map(|r| &r.output).collect();
            let got = unit::attention::assemble(&cfg, spec.method, &outs);
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
            let data = unit::mlp::MlpData::random(&sh, spec.activation, &mut rng);
            let cfg = unit::mlp::MlpCfg::from_spec(spec);
            let (runs, wall) = match spec.method {
                ExecMethod::Metp => {
                    device::run_devices(sh.p, spec.link, |dev| mlp::metp(dev, &cfg, &data))?
                }
                ExecMethod::Tp => {
                    device::run_devices(sh.p, spec.link, |dev| mlp::tp(dev, &cfg, &data))?
                }
            };
            let outs: Vec<&unit::mlp::MlpOut> = runs.iter().map(|r| &r.output).collect();
            let got = unit::mlp::assemble(&cfg, spec.method, &outs);
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
    // The CPU runtime's allocations are its tracked buffers: measured and tracked are one.
    let peak_bytes = devices.iter().map(|d| d.peak_bytes).max().unwrap_or(0);
    Ok(RunReport {
        spec: *spec,
        max_rel_error,
        errors,
        measured_peak_bytes: peak_bytes,
        tracked_peak_bytes: peak_bytes,
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
        allocator_peak_bytes: None,
        peak_breakdown: r.mem.peak_breakdown,
        end_live_bytes: r.mem.end_live_bytes,
        inventory_peak_bytes: None,
        busy_s: r.busy_s,
        comm: r.comm,
        steps: r.steps,
    }
}

#[cfg(test)]
mod tests;
