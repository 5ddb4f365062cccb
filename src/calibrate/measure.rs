//! What to measure ([`Plan`]) and measuring it on a [`Backend`] ([`measure`]) into the kernel
//! measurement file format ([`KernelMeasurements`]), which [`super::kernel_fit::fit_profile`]
//! fits — the same path for every backend and for a file measured elsewhere.

use serde::Serialize;

use super::backend::{AttnCall, Backend, GemmShape, Pass};
use super::measurements::{
    AttentionSample, CopySample, GemmSample, KernelMeasurements, OverlapSample, P2pSample,
};
use super::predict::{unit_work, Work};
use crate::error::Result;
use crate::exec::device::Link;
use crate::exec::{ExecMethod, RunSpec, Shape, Unit};

/// The measurements of one calibration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// GEMM shapes.
    pub gemms: Vec<GemmShape>,
    /// Attention calls (each timed forward and, unless the backend runs forward only,
    /// backward).
    pub attention: Vec<AttnCall>,
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
        // Skinny shapes (short k, few rows), so that per-tile and per-call times separate.
        let last = *squares.last().unwrap_or(&64);
        gemms.push(GemmShape::new(last, last, 16));
        gemms.push(GemmShape::new(16, last, last));
        let cs: &[usize] = if quick {
            &[16, 32, 64]
        } else {
            &[32, 64, 128, 256, 512]
        };
        let d = if quick { 8 } else { 32 };
        let mut attention: Vec<AttnCall> =
            cs.iter().map(|&c| AttnCall::block(1, c, 2, d)).collect();
        // Blocks with other head counts, so that a per-call and a per-block time can be told
        // apart.
        attention.push(AttnCall::block(1, cs[0], 8, d));
        attention.push(AttnCall::block(2, cs[1], 4, d));
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

/// Runs the plan's kernel and link measurements (not the units) on `backend` and returns them
/// as a measurement file. `progress` is told what is being measured.
pub fn measure(
    backend: &mut dyn Backend,
    plan: &Plan,
    date: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<KernelMeasurements> {
    let mut m = KernelMeasurements {
        what: format!(
            "measured by metp-sim calibrate --backend {}: {}; each time is the backend's \
             median per call",
            backend.name(),
            backend.device()
        ),
        date: date.to_string(),
        device: backend.device(),
        software: format!("metp-sim {} {}", env!("CARGO_PKG_VERSION"), backend.name()),
        sm_count: None,
        timing: Some(backend.timing()),
        gemm: vec![],
        attention: vec![],
        copy: vec![],
        eager_op_s: None,
        p2p: vec![],
        collectives: vec![],
        overlap: vec![],
    };
    progress(&format!("{} GEMM shapes", plan.gemms.len()));
    for &g in &plan.gemms {
        m.gemm.push(GemmSample {
            m: g.m as u64,
            n: g.n as u64,
            k: g.k as u64,
            flops: Some(g.flops()),
            s: backend.gemm_s(g)?,
        });
    }
    progress(&format!("{} attention calls", plan.attention.len()));
    for &a in &plan.attention {
        let fwd_s = backend.attention_s(a, Pass::Forward)?;
        let bwd_s = if backend.forward_only() {
            None
        } else {
            Some(backend.attention_s(a, Pass::Backward)?)
        };
        m.attention.push(AttentionSample {
            b: a.batch as u64,
            heads: a.heads as u64,
            kv_heads: None,
            s: None,
            q_tokens: Some(a.q_tokens as u64),
            kv_tokens: Some(a.kv_tokens as u64),
            head_dim: Some(a.head_dim as u64),
            causal: a.causal,
            fwd_flops: Some(a.flops(Pass::Forward)),
            fwd_s,
            bwd_s,
        });
    }
    // Copies and element-wise passes: the backend is asked by bytes moved (read + write); the
    // file records the buffer (half of that).
    progress(&format!(
        "{} element-wise sizes",
        plan.elementwise_bytes.len()
    ));
    for &n in &plan.elementwise_bytes {
        m.copy.push(CopySample {
            bytes: (n / 2).max(1),
            copy_s: None,
            mul_s: Some(backend.elementwise_s(n)?),
        });
    }
    progress("copies");
    for &n in &plan.copy_bytes {
        m.copy.push(CopySample {
            bytes: (n / 2).max(1),
            copy_s: Some(backend.copy_s(n)?),
            mul_s: None,
        });
    }
    progress(&format!("{} message sizes", plan.transfer_bytes.len()));
    for &n in &plan.transfer_bytes {
        m.p2p.push(P2pSample {
            from: 0,
            to: 1,
            bytes: n,
            s: backend.transfer_s(n)?,
            via: None,
        });
    }
    progress("compute slowdown under a transfer");
    let (g, bytes, samples) = plan.slowdown;
    for _ in 0..samples.max(1) {
        let s = backend.slowdown(g, bytes)?;
        m.overlap.push(OverlapSample {
            m: g.m as u64,
            n: g.n as u64,
            k: g.k as u64,
            traffic_bytes: bytes,
            via: None,
            alone_s: s.alone_s,
            with_traffic_s: s.with_transfer_s,
        });
    }
    Ok(m)
}
