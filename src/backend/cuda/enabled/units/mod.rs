//! METP's and Megatron TP's attention and MLP units, forward and backward, on the GPU: p virtual
//! devices stepped together ([`world`]), the CPU runtime's programs (`backend::cpu::units`)
//! ported buffer for buffer — both follow the algorithms of `backend::unit` — ([`attention`]
//! with its ring-step blocks in [`blocks`] and weight fetch in [`fetch`], [`mlp`]), checked
//! against the f64 reference (`backend::unit::reference`) and reported like the CPU runtime's
//! runs (`backend::unit::RunReport`): time from GPU events,
//! per-device tracked high-water marks next to the memory layer's unit inventory, each GPU's
//! own view of its memory.
//!
//! **Correctness at an affordable size.** The f64 reference is checked on the host; above
//! ~2·10¹⁰ reference FLOPs (a LLaMA layer at thousands of tokens) the run's own output is not
//! checked and the errors reported are those of the same unit, method and options at a
//! reduced size (p unchanged, one head of the same dimension per device, 64 tokens per device),
//! run on the same GPU path; their names say so ("out (checked at …)").
//!
//! Depends on `backend::unit` (the algorithms, inputs, reference and reports), the GPU parts of
//! `backend::cuda`, `config` and `memory`; never on `backend::cpu`: the CPU's programs are
//! ported, not called.

// The programs step all devices in loops over the device index, which index several
// per-device vectors at once (device i, its ring neighbours).
#![allow(clippy::needless_range_loop)]

mod attention;
mod blocks;
mod fetch;
mod mlp;
mod world;

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use crate::backend::cuda::layout::{tp_attention_bytes, QkvParts};
use crate::backend::unit::attention::{assemble as attn_assemble, AttnCfg, AttnData, AttnOut};
use crate::backend::unit::device::CommStats;
use crate::backend::unit::mlp::{assemble as mlp_assemble, MlpCfg, MlpData, MlpOut};
use crate::backend::unit::reference::{rel_error, to64};
use crate::backend::unit::rng::SplitMix64;
use crate::backend::unit::{
    reference, DeviceReport, ExecMethod, GpuMemory, RunReport, RunSpec, Shape, Unit,
};
use crate::config::{Activation, UnitSupport, WeightExchange};
use crate::memory::unit::unit_inventory;

use super::gpu::Gpu;
use super::mem::DevicePool;
use super::xfer::Link;
use super::{Error, Result};
pub(crate) use world::World;

/// f64 FLOPs above which the reference runs at a reduced size instead.
const REFERENCE_FLOPS: f64 = 2e10;

fn invalid(spec: &RunSpec, message: String) -> Error {
    Error::InvalidConfig {
        method: spec.method.id().into(),
        p: spec.shape.p as u64,
        message,
    }
}

/// What these units honour of a [`crate::config::UnitSpec`]: the CPU runtime's programs,
/// ported buffer for buffer — forward and backward, micro-batches, causal masks, fused (head
/// dimension 64 or 128: [`check`] refuses others) and unfused attention, one or two receive
/// buffers, both weight exchanges, multi-head or grouped-query attention, a GeLU or SwiGLU
/// MLP. Not: head groups other than p, stored Q/K/V or MLP activation input — each refused in
/// one line ([`UnitSupport::check`]).
pub(crate) const SUPPORT: UnitSupport = UnitSupport {
    backward: true,
    micro_batches: true,
    causal: true,
    unfused: true,
    fused: true,
    recv_buffers: &[1, 2],
    weight_exchanges: &[WeightExchange::Ring, WeightExchange::Broadcast],
    head_groups: false,
    store_qkv: false,
    store_mlp_act: false,
    grouped_kv: true,
    activations: &[Activation::Gelu, Activation::Swiglu],
};

/// The CUDA backend's checks of a run beyond [`crate::config::UnitSpec::check`] (sizes and
/// divisibility) and [`SUPPORT`] (the options it honours): no link throttle, and the head
/// dimensions of the fused kernel. Sizes are
/// bounded by device memory ([`bytes_per_device`]), not by the CPU runtime's element limits.
pub(crate) fn check(spec: &RunSpec) -> Result<()> {
    spec.unit_spec.check()?;
    SUPPORT.check("cuda", &spec.unit_spec)?;
    if spec.link.is_some() {
        return Err(Error::arg(
            "--link-bandwidth",
            "the link throttle exists only on the cpu backend",
        ));
    }
    let d = spec.shape.d();
    if spec.unit == Unit::Attention && spec.fused && d != 64 && d != 128 {
        return Err(invalid(
            spec,
            format!(
                "the cuda backend's fused attention kernel supports head dimension 64 and 128, \
                 not {d} (h/a = {}/{}); run unfused (--no-flash) or pick other heads",
                spec.shape.h, spec.shape.a
            ),
        ));
    }
    Ok(())
}

/// Bytes one device of the run holds at most: METP the unit inventory's peak; TP the sum of
/// its buffers (it frees little before the end) — plus the staged upstream gradient.
pub(crate) fn bytes_per_device(spec: &RunSpec) -> Result<u64> {
    let sh = spec.shape;
    let staged = 2
        * (sh.b
            * if spec.method == ExecMethod::Metp {
                sh.c()
            } else {
                sh.s
            }
            * sh.h) as u64;
    let own = match spec.method {
        ExecMethod::Metp => {
            let inv = unit_inventory(&spec.unit_spec).map_err(|m| invalid(spec, m))?;
            inv.peak_bytes.min(u64::MAX as u128) as u64
        }
        ExecMethod::Tp => {
            let (r, h) = ((sh.b * sh.s) as u64, sh.h);
            match spec.unit {
                Unit::Attention => tp_attention_bytes(&sh, spec.kv_heads, spec.fused),
                Unit::Mlp => {
                    let (h, fp) = (h as u64, sh.fp() as u64);
                    let u = crate::backend::unit::mlp::inputs_per_output(spec.activation) as u64;
                    // W1 (u·fp columns) and W2 in bf16 with fp32 gradients; X, out, dOut, dX;
                    // the activation input, output and input gradient.
                    6 * ((u + 1) * h * fp) + 2 * r * h * 4 + 2 * r * fp * (2 * u + 1)
                }
            }
        }
    };
    Ok(own + staged)
}

/// f64 FLOPs of the reference for `sh`.
fn reference_flops(unit: Unit, sh: &Shape) -> f64 {
    let (b, s, h, f) = (sh.b as f64, sh.s as f64, sh.h as f64, sh.f as f64);
    match unit {
        Unit::Attention => 24.0 * b * s * h * h + 12.0 * b * s * s * h,
        Unit::Mlp => 12.0 * b * s * h * f,
    }
}

/// The reduced shape the errors of an unaffordable run are checked at, and its K/V heads: one
/// K/V head per device, serving one query head, or two under grouped-query attention (the
/// grouped path — K/V head k/rep, shared dK/dV — at a quarter of the cost of a larger rep).
fn check_shape(spec: &RunSpec) -> (Shape, usize) {
    let p = spec.shape.p;
    let (d, rep) = match spec.unit {
        Unit::Attention if spec.kv_heads < spec.shape.a => (spec.shape.d(), 2),
        Unit::Attention => (spec.shape.d(), 1),
        Unit::Mlp => (64, 1),
    };
    let h = p * rep * d;
    let shape = Shape {
        b: 1,
        s: 64 * p,
        h,
        a: p * rep,
        f: 2 * h,
        p,
    };
    (shape, p)
}

/// Host-side inputs of a run, kept for the repetitions of the same spec.
enum Data {
    Attention(Rc<AttnData>),
    Mlp(Rc<MlpData>),
}

/// Unit-run state kept by the backend between runs.
#[derive(Default)]
pub(crate) struct Units {
    /// The last two inputs (a run's and its reduced check's), most recent last.
    data: Vec<(String, Rc<Data>)>,
    checked: HashMap<String, BTreeMap<String, f64>>,
    /// Each virtual device's memory pool, by (GPU ordinal, device index), kept across runs so
    /// that a timed run reuses the memory its warm-up mapped (`None`: no memory pools).
    pools: HashMap<(usize, usize), Option<Rc<DevicePool>>>,
}

/// Where the devices of a run live.
pub(crate) struct Placement {
    /// Device i's GPU.
    pub gpus: Vec<Rc<Gpu>>,
    /// How their messages travel.
    pub link: Link,
}

impl Units {
    /// Device `i`'s pool on `gpu` (made on first use).
    fn pool(&mut self, gpu: &Rc<Gpu>, i: usize) -> Result<Option<Rc<DevicePool>>> {
        if let Some(p) = self.pools.get(&(gpu.ordinal, i)) {
            return Ok(p.clone());
        }
        let p = DevicePool::new(gpu)?;
        self.pools.insert((gpu.ordinal, i), p.clone());
        Ok(p)
    }

    /// Bytes reserved by the pools on `gpu` and free for their next run.
    fn idle_pool_bytes(&self, gpu: &Gpu) -> Result<u64> {
        let mut idle = 0u64;
        for ((ordinal, _), p) in &self.pools {
            if let (true, Some(p)) = (*ordinal == gpu.ordinal, p) {
                idle = idle.saturating_add(p.idle_bytes()?);
            }
        }
        Ok(idle)
    }

    fn data(&mut self, spec: &RunSpec) -> Rc<Data> {
        let key = format!(
            "{:?} {:?} kv={} {:?} {}",
            spec.unit, spec.activation, spec.kv_heads, spec.shape, spec.seed
        );
        if let Some((_, d)) = self.data.iter().find(|(k, _)| *k == key) {
            return d.clone();
        }
        let mut rng = SplitMix64::new(spec.seed);
        let d = Rc::new(match spec.unit {
            Unit::Attention => Data::Attention(Rc::new(AttnData::random(
                &spec.shape,
                spec.kv_heads,
                &mut rng,
            ))),
            Unit::Mlp => Data::Mlp(Rc::new(MlpData::random(
                &spec.shape,
                spec.activation,
                &mut rng,
            ))),
        });
        if self.data.len() == 2 {
            self.data.remove(0);
        }
        self.data.push((key, d.clone()));
        d
    }

    /// Runs `spec` on `place` and reports it (errors at a reduced size when the reference is
    /// too costly at this one; `place_small` gives the placement of that reduced run).
    pub fn run(
        &mut self,
        spec: &RunSpec,
        place: Placement,
        place_small: &mut dyn FnMut(usize) -> Result<Placement>,
    ) -> Result<RunReport> {
        check(spec)?;
        let affordable = reference_flops(spec.unit, &spec.shape) <= REFERENCE_FLOPS;
        let (mut report, outs) = self.execute(spec, place)?;
        let errors = if affordable {
            errors_of(spec, &self.data(spec), &outs)?
        } else {
            let mut small = *spec;
            (small.unit_spec.shape, small.unit_spec.kv_heads) = check_shape(spec);
            let key = format!("{small:?}");
            match self.checked.get(&key) {
                Some(e) => e.clone(),
                None => {
                    let (_, outs_small) = self.execute(&small, place_small(small.shape.p)?)?;
                    let sh = small.shape;
                    let e: BTreeMap<String, f64> =
                        errors_of(&small, &self.data(&small), &outs_small)?
                            .into_iter()
                            .map(|(k, v)| {
                                (
                                    format!(
                                        "{k} (checked at b={} s={} h={} a={} kv_heads={} f={})",
                                        sh.b, sh.s, sh.h, sh.a, small.kv_heads, sh.f
                                    ),
                                    v,
                                )
                            })
                            .collect();
                    self.checked.insert(key, e.clone());
                    e
                }
            }
        };
        report.max_rel_error = errors.values().cloned().fold(0.0, f64::max);
        report.errors = errors;
        Ok(report)
    }

    /// Executes `spec` once: the report without errors, and every device's outputs.
    fn execute(&mut self, spec: &RunSpec, place: Placement) -> Result<(RunReport, Outs)> {
        let mut gpus: Vec<Rc<Gpu>> = Vec::new();
        for g in &place.gpus {
            if !gpus.iter().any(|x| Rc::ptr_eq(x, g)) {
                gpus.push(g.clone());
            }
        }
        // Device memory: refuse a run that cannot fit rather than fail half-way.
        let need = bytes_per_device(spec)?;
        for g in &gpus {
            let on = place.gpus.iter().filter(|x| Rc::ptr_eq(x, g)).count() as u64;
            let (free, _) = g
                .ctx
                .mem_get_info()
                .map_err(|e| super::gpu_err("cuMemGetInfo", e))?;
            // What the devices' pools keep reserved from earlier runs is theirs to reuse.
            let free = (free as u64).saturating_add(self.idle_pool_bytes(g)?);
            let want = need.saturating_mul(on);
            if want as f64 > 0.9 * free as f64 {
                return Err(invalid(
                    spec,
                    format!(
                        "needs about {:.1} GiB on GPU {} ({on} virtual devices × {:.2} GiB); \
                         {:.1} GiB are free",
                        want as f64 / 2f64.powi(30),
                        g.ordinal,
                        need as f64 / 2f64.powi(30),
                        free as f64 / 2f64.powi(30)
                    ),
                ));
            }
        }
        let before: Vec<u64> = gpus.iter().map(|g| g.used_bytes()).collect::<Result<_>>()?;
        let data = self.data(spec);
        let pools = place
            .gpus
            .iter()
            .enumerate()
            .map(|(i, g)| self.pool(g, i))
            .collect::<Result<Vec<_>>>()?;
        let mut w = World::new(place.gpus, pools, place.link);
        let sh = spec.shape;
        let rows = if spec.method == ExecMethod::Metp {
            sh.b * sh.c()
        } else {
            sh.b * sh.s
        };
        let (time, steps, outs) = match (&*data, spec.unit) {
            (Data::Attention(d), _) => {
                let cfg = AttnCfg::from_spec(spec);
                let handed = match spec.method {
                    ExecMethod::Metp => attention::metp(&mut w, &cfg, d)?,
                    ExecMethod::Tp => attention::tp(&mut w, &cfg, d)?,
                };
                let (time, steps) = w.finish()?;
                let outs = handed
                    .iter()
                    .map(|x| x.fetch(rows, sh.h, QkvParts::of(&cfg)))
                    .collect::<Result<Vec<_>>>()?;
                (time, steps, Outs::Attention(outs))
            }
            (Data::Mlp(d), _) => {
                let cfg = MlpCfg::from_spec(spec);
                let handed = match spec.method {
                    ExecMethod::Metp => mlp::metp(&mut w, &cfg, d)?,
                    ExecMethod::Tp => mlp::tp(&mut w, &cfg, d)?,
                };
                let (time, steps) = w.finish()?;
                let outs = handed
                    .iter()
                    .map(|x| x.fetch(rows, sh.h, sh.fp(), cfg.u() * sh.fp()))
                    .collect::<Result<Vec<_>>>()?;
                (time, steps, Outs::Mlp(outs))
            }
        };
        let mem = w.memory();
        for g in w.gpus() {
            g.sync()?;
        }
        let highs = w.allocator_highs()?;
        let mut gpu_memory = Vec::new();
        for (k, g) in w.gpus().iter().enumerate() {
            // The devices' pools and the default pool (the inputs staged for the run).
            let allocator_high_bytes = match (w.gpu_allocator_high(k, &highs), g.pool_high_bytes()?)
            {
                (Some(d), Some(staged)) => Some(d.saturating_add(staged)),
                _ => None,
            };
            gpu_memory.push(GpuMemory {
                gpu: g.ordinal,
                virtual_devices: w.devices_on(k),
                used_before_bytes: before[k],
                used_after_bytes: 0,
                allocator_high_bytes,
                tracked_high_bytes: w.gpu_tracked_high(k),
            });
        }
        let gpus_used: Vec<Rc<Gpu>> = w.gpus().to_vec();
        drop(w);
        for (k, g) in gpus_used.iter().enumerate() {
            g.sync()?;
            gpu_memory[k].used_after_bytes = g.used_bytes()?;
        }
        let inventory = if spec.method == ExecMethod::Metp {
            Some(unit_inventory(&spec.unit_spec).map_err(|m| invalid(spec, m))?)
        } else {
            None
        };
        let devices: Vec<DeviceReport> = mem
            .into_iter()
            .zip(steps)
            .zip(highs)
            .enumerate()
            .map(
                |(rank, (((peak, breakdown, live), steps), high))| DeviceReport {
                    rank,
                    peak_bytes: peak,
                    allocator_peak_bytes: high,
                    peak_breakdown: breakdown,
                    end_live_bytes: live,
                    inventory_peak_bytes: inventory
                        .as_ref()
                        .map(|i| i.device_peak_bytes(rank as u64) as u64),
                    busy_s: time,
                    comm: CommStats::default(),
                    steps,
                },
            )
            .collect();
        let tracked_peak_bytes = devices.iter().map(|d| d.peak_bytes).max().unwrap_or(0);
        let report = RunReport {
            spec: *spec,
            max_rel_error: 0.0,
            errors: BTreeMap::new(),
            // The driver's count where every device has one, else the tally.
            measured_peak_bytes: devices
                .iter()
                .map(|d| d.allocator_peak_bytes)
                .collect::<Option<Vec<u64>>>()
                .map_or(tracked_peak_bytes, |v| v.into_iter().max().unwrap_or(0)),
            tracked_peak_bytes,
            inventory_peak_bytes: inventory.map(|i| i.peak_bytes as u64),
            measured_time_s: time,
            devices,
            gpu_memory,
        };
        Ok((report, outs))
    }
}

/// Every device's outputs of one run.
enum Outs {
    Attention(Vec<AttnOut>),
    Mlp(Vec<MlpOut>),
}

/// Relative errors of a run's outputs and gradients against the f64 reference.
fn errors_of(spec: &RunSpec, data: &Data, outs: &Outs) -> Result<BTreeMap<String, f64>> {
    let sh = spec.shape;
    Ok(match (data, outs) {
        (Data::Attention(d), Outs::Attention(o)) => {
            let cfg = AttnCfg::from_spec(spec);
            let got = attn_assemble(&cfg, spec.method, &o.iter().collect::<Vec<_>>());
            let r = reference::attention(
                &to64(&d.x),
                &to64(&d.wqkv),
                &to64(&d.wo),
                &to64(&d.dout),
                sh.b,
                sh.a,
                spec.causal,
            );
            BTreeMap::from([
                ("out".to_string(), rel_error(&got.out, &r.out)),
                ("dx".to_string(), rel_error(&got.dx, &r.dx)),
                ("dw_qkv".to_string(), rel_error(&got.dwqkv, &r.dwqkv)),
                ("dw_o".to_string(), rel_error(&got.dwo, &r.dwo)),
            ])
        }
        (Data::Mlp(d), Outs::Mlp(o)) => {
            let cfg = MlpCfg::from_spec(spec);
            let got = mlp_assemble(&cfg, spec.method, &o.iter().collect::<Vec<_>>());
            let r = reference::mlp(&to64(&d.x), &to64(&d.w1), &to64(&d.w2), &to64(&d.dout));
            BTreeMap::from([
                ("out".to_string(), rel_error(&got.out, &r.out)),
                ("dx".to_string(), rel_error(&got.dx, &r.dx)),
                ("dw1".to_string(), rel_error(&got.dw1, &r.dw1)),
                ("dw2".to_string(), rel_error(&got.dw2, &r.dw2)),
            ])
        }
        _ => return Err(super::gpu_err("unit", "outputs of another unit")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Activation;

    /// What the units declare is what they run: the CPU runtime's options pass, the ones its
    /// programs do not implement are refused in one line naming the option — before any GPU
    /// is touched.
    #[test]
    fn calib_cuda_support_refuses_what_the_units_do_not_run() {
        let shape = Shape {
            b: 2,
            s: 256,
            h: 256,
            a: 4,
            f: 1024,
            p: 2,
        };
        let mut ok = RunSpec::new(Unit::Attention, ExecMethod::Metp, shape);
        ok.causal = true;
        ok.fused = false;
        ok.metp.recv_buffers = 1;
        ok.metp.weight_exchange = WeightExchange::Ring;
        check(&ok).unwrap();
        let refused = |f: &dyn Fn(&mut RunSpec), what: &str| {
            let mut spec = RunSpec::new(Unit::Attention, ExecMethod::Metp, shape);
            f(&mut spec);
            let e = check(&spec).unwrap_err().to_string();
            assert!(e.contains(what) && e.lines().count() == 1, "{what}: {e}");
        };
        refused(&|s| s.metp.store_qkv = true, "--metp-store-qkv");
        refused(&|s| s.metp.head_groups = Some(4), "head groups");
        // Grouped-query attention runs (2 query heads per K/V head), METP and TP; K/V heads
        // that p does not divide are refused by the unit's own check.
        for method in [ExecMethod::Metp, ExecMethod::Tp] {
            let mut gqa = RunSpec::new(Unit::Attention, method, shape);
            gqa.kv_heads = 2;
            check(&gqa).unwrap();
        }
        refused(&|s| s.kv_heads = 1, "kv_heads");
        // SwiGLU runs (the CPU runtime's program, ported).
        let mut swiglu = RunSpec::new(Unit::Mlp, ExecMethod::Metp, shape);
        swiglu.activation = Activation::Swiglu;
        check(&swiglu).unwrap();
        // d = 256/4 = 64 fused is fine; d = 32 fused is not.
        refused(
            &|s| {
                s.unit_spec.shape.a = 8;
                s.kv_heads = 8;
            },
            "head dimension",
        );
    }

    /// An unaffordable run's errors are checked at a reduced size that keeps its kind of
    /// attention: grouped-query (two query heads per K/V head, one K/V head per device) or
    /// multi-head; the reduced spec passes the unit's checks.
    #[test]
    fn calib_cuda_reduced_check_keeps_grouped_query_attention() {
        let shape = Shape {
            b: 1,
            s: 32768,
            h: 8192,
            a: 64,
            f: 28672,
            p: 8,
        };
        for (kv, a, rep) in [(8, 16, 2), (64, 8, 1)] {
            let mut spec = RunSpec::new(Unit::Attention, ExecMethod::Metp, shape);
            spec.kv_heads = kv;
            assert!(reference_flops(spec.unit, &spec.shape) > REFERENCE_FLOPS);
            let (small, small_kv) = check_shape(&spec);
            assert_eq!((small.a, small_kv, small.d()), (a, 8, 128));
            assert_eq!(small.a / small_kv, rep);
            let mut s = spec;
            (s.unit_spec.shape, s.unit_spec.kv_heads) = (small, small_kv);
            check(&s).unwrap();
            // Twice the columns: at most four times the reference of a multi-head check.
            let most = if rep == 1 { 1.0 } else { 4.0 } * REFERENCE_FLOPS;
            assert!(reference_flops(s.unit, &s.shape) <= most);
        }
    }
}
