//! What to measure ([`Plan`]), measuring it on a [`Backend`] ([`measure`]) and fitting the
//! result ([`fit_all`]).

use serde::Serialize;

use super::backend::{AttnBlock, Backend, GemmShape, Pass, SlowdownSample};
use super::fit::{self, EfficiencyFit};
use super::predict::{unit_work, Work};
use super::profile::Fits;
use crate::error::Result;
use crate::exec::device::Link;
use crate::exec::{ExecMethod, RunSpec, Shape, Unit};

/// The measurements of one calibration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// GEMM shapes.
    pub gemms: Vec<GemmShape>,
    /// Attention blocks (each timed forward and backward).
    pub attention: Vec<AttnBlock>,
    /// Element-wise sizes in bytes.
    pub elementwise_bytes: Vec<u64>,
    /// Copy sizes in bytes (the best rate is the memory bandwidth).
    pub copy_bytes: Vec<u64>,
    /// Message sizes in bytes.
    pub transfer_bytes: Vec<u64>,
    /// The GEMM and message size of the slowdown measurement, and how many samples.
    pub slowdown: (GemmShape, u64, usize),
    /// Units to run and compare with the prediction.
    pub units: Vec<RunSpec>,
}

/// The METP attention and MLP units `calibrate` runs on `p` devices: a/p = 2 heads per group,
/// head dimension 8 (quick) or 32, c = s/p = 64 (quick) or 512 local tokens, f = 4h.
pub fn default_units(p: usize, quick: bool) -> Vec<RunSpec> {
    let p = p.max(1);
    let (d, c) = if quick { (8, 64) } else { (32, 512) };
    let a = 2 * p;
    let h = a * d;
    let shape = Shape {
        b: 1,
        s: c * p,
        h,
        a,
        f: 4 * h,
        p,
    };
    vec![
        RunSpec::new(Unit::Attention, ExecMethod::Metp, shape),
        RunSpec::new(Unit::Mlp, ExecMethod::Metp, shape),
    ]
}

/// The units `calibrate` runs on a backend: [`default_units`] on the CPU; on a GPU, head
/// dimension 64 and c = 512 (quick) or 1024 local tokens — large enough to keep the GPU busy,
/// small enough for the f64 reference check on the host.
pub fn default_units_for(backend: &str, p: usize, quick: bool) -> Vec<RunSpec> {
    if backend != "cuda" {
        return default_units(p, quick);
    }
    let p = p.max(1);
    let (d, c) = (64, if quick { 512 } else { 1024 });
    let a = 2 * p;
    let h = a * d;
    let shape = Shape {
        b: 1,
        s: c * p,
        h,
        a,
        f: 4 * h,
        p,
    };
    vec![
        RunSpec::new(Unit::Attention, ExecMethod::Metp, shape),
        RunSpec::new(Unit::Mlp, ExecMethod::Metp, shape),
    ]
}

impl Plan {
    /// A plan measuring a generic ladder of sizes plus every kernel of `units` (so that the
    /// profile's tables hold the units' exact sizes). `link`: the throttle, which bounds the
    /// message sizes so that each takes at most ~20 ms (quick) or ~100 ms.
    pub fn for_units(units: Vec<RunSpec>, quick: bool, link: Option<Link>) -> Plan {
        let squares: &[usize] = if quick {
            &[16, 32, 64, 128]
        } else {
            &[16, 32, 64, 128, 256, 512]
        };
        let mut gemms: Vec<GemmShape> = squares.iter().map(|&n| GemmShape::new(n, n, n)).collect();
        let cs: &[usize] = if quick {
            &[16, 32, 64]
        } else {
            &[32, 64, 128, 256, 512]
        };
        let mut attention: Vec<AttnBlock> = cs
            .iter()
            .map(|&c| AttnBlock {
                b: 1,
                c,
                heads: 2,
                d: if quick { 8 } else { 32 },
            })
            .collect();
        let ew_elems: &[u64] = if quick {
            &[1 << 10, 1 << 12, 1 << 14, 1 << 16]
        } else {
            &[1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20]
        };
        let mut elementwise_bytes: Vec<u64> = ew_elems.iter().map(|e| 4 * e).collect();
        for spec in &units {
            for w in unit_work(spec) {
                match w {
                    Work::Gemm(g) => gemms.push(g),
                    Work::Attention(b, _) => attention.push(b),
                    Work::Elementwise(bytes) if bytes >= 1024 => elementwise_bytes.push(bytes),
                    Work::Elementwise(_) | Work::Copy(_) => {}
                }
            }
        }
        gemms.sort();
        gemms.dedup();
        attention.sort();
        attention.dedup();
        elementwise_bytes.sort();
        elementwise_bytes.dedup();
        let max_bytes: u64 = if quick { 1 << 20 } else { 1 << 24 };
        let budget_s = if quick { 0.02 } else { 0.1 };
        let cap = match link {
            Some(l) => ((l.bandwidth_bytes_per_s * budget_s) as u64).clamp(4096, max_bytes),
            None => max_bytes,
        };
        let mut transfer_bytes = vec![];
        let mut n = 256u64;
        while n <= cap {
            transfer_bytes.push(n);
            n *= 4;
        }
        if transfer_bytes.last() != Some(&cap) {
            transfer_bytes.push(cap);
        }
        let slow_gemm = if quick {
            GemmShape::new(64, 64, 64)
        } else {
            GemmShape::new(256, 256, 256)
        };
        Plan {
            gemms,
            attention,
            copy_bytes: if quick {
                vec![1 << 16, 1 << 20]
            } else {
                vec![1 << 16, 1 << 20, 1 << 24]
            },
            elementwise_bytes,
            transfer_bytes,
            slowdown: (slow_gemm, cap.min(1 << 20), if quick { 3 } else { 5 }),
            units,
        }
    }
}

/// One timed kernel.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Timed<T> {
    /// What.
    pub what: T,
    /// Seconds per call.
    pub seconds: f64,
}

/// Everything a calibration measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Measurements {
    /// GEMMs.
    pub gemm: Vec<Timed<GemmShape>>,
    /// Attention blocks.
    pub attention: Vec<Timed<(AttnBlock, Pass)>>,
    /// Element-wise kernels, by bytes.
    pub elementwise: Vec<Timed<u64>>,
    /// Copies, by bytes.
    pub copies: Vec<Timed<u64>>,
    /// Messages, by bytes.
    pub transfers: Vec<Timed<u64>>,
    /// Slowdown samples.
    pub slowdown: Vec<SlowdownSample>,
}

/// Runs the plan's kernel measurements (not the units) on `backend`. `progress` is told what
/// is being measured.
pub fn measure(
    backend: &mut dyn Backend,
    plan: &Plan,
    progress: &mut dyn FnMut(&str),
) -> Result<Measurements> {
    let mut m = Measurements {
        gemm: vec![],
        attention: vec![],
        elementwise: vec![],
        copies: vec![],
        transfers: vec![],
        slowdown: vec![],
    };
    progress(&format!("{} GEMM shapes", plan.gemms.len()));
    for &g in &plan.gemms {
        m.gemm.push(Timed {
            what: g,
            seconds: backend.gemm_s(g)?,
        });
    }
    progress(&format!("{} attention blocks", plan.attention.len()));
    for &b in &plan.attention {
        let passes: &[Pass] = if backend.forward_only() {
            &[Pass::Forward]
        } else {
            &[Pass::Forward, Pass::Backward]
        };
        for &pass in passes {
            m.attention.push(Timed {
                what: (b, pass),
                seconds: backend.attention_s(b.call(), pass)?,
            });
        }
    }
    progress(&format!(
        "{} element-wise sizes",
        plan.elementwise_bytes.len()
    ));
    for &n in &plan.elementwise_bytes {
        m.elementwise.push(Timed {
            what: n,
            seconds: backend.elementwise_s(n)?,
        });
    }
    progress("copies");
    for &n in &plan.copy_bytes {
        m.copies.push(Timed {
            what: n,
            seconds: backend.copy_s(n)?,
        });
    }
    progress(&format!("{} message sizes", plan.transfer_bytes.len()));
    for &n in &plan.transfer_bytes {
        m.transfers.push(Timed {
            what: n,
            seconds: backend.transfer_s(n)?,
        });
    }
    progress("compute slowdown under a transfer");
    let (g, bytes, samples) = plan.slowdown;
    for _ in 0..samples.max(1) {
        m.slowdown.push(backend.slowdown(g, bytes)?);
    }
    Ok(m)
}

/// Fits every figure from the measurements. The peak is the best FLOP rate over GEMMs and
/// attention blocks (so no fraction exceeds 1).
pub fn fit_all(m: &Measurements) -> Result<Fits> {
    let gemm_rates: Vec<(f64, f64)> = m
        .gemm
        .iter()
        .map(|t| (t.what.flops(), t.what.flops() / t.seconds))
        .collect();
    let attn_rates: Vec<(f64, f64)> = m
        .attention
        .iter()
        .map(|t| {
            let flops = t.what.0.flops(t.what.1);
            (flops, flops / t.seconds)
        })
        .collect();
    let gemm = fit::efficiency("gemm", &gemm_rates)?;
    let attention = fit::efficiency("attention", &attn_rates)?;
    let peak = gemm.peak.max(attention.peak);
    let rescale = |f: EfficiencyFit| EfficiencyFit {
        points: f
            .points
            .iter()
            .map(|&(s, e)| (s, e * f.peak / peak))
            .collect(),
        peak,
    };
    let ew_rates: Vec<(f64, f64)> = m
        .elementwise
        .iter()
        .map(|t| (t.what as f64, t.what as f64 / t.seconds))
        .collect();
    let copy_rate = m
        .copies
        .iter()
        .map(|t| t.what as f64 / t.seconds)
        .fold(0.0, f64::max);
    let ew = fit::efficiency("elementwise", &ew_rates)?;
    // Fractions of the memory bandwidth: the best copy (or the best element-wise kernel, if
    // that was faster or no copy was measured).
    let hbm = copy_rate.max(ew.peak);
    let elementwise = EfficiencyFit {
        points: ew
            .points
            .iter()
            .map(|&(s, e)| (s, e * ew.peak / hbm))
            .collect(),
        peak: hbm,
    };
    let link_pts: Vec<(f64, f64)> = m
        .transfers
        .iter()
        .map(|t| (t.what as f64, t.seconds))
        .collect();
    let slow: Vec<(f64, f64)> = m
        .slowdown
        .iter()
        .map(|s| (s.alone_s, s.with_transfer_s))
        .collect();
    Ok(Fits {
        gemm: rescale(gemm),
        attention: rescale(attention),
        elementwise,
        link: fit::link(&link_pts)?,
        slowdown_fraction: fit::slowdown(&slow)?,
    })
}
