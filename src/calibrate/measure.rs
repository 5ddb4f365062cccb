//! What to measure ([`Plan`]) and measuring it on a [`Backend`] ([`measure`]) into the kernel
//! measurement file format ([`KernelMeasurements`]), which `fitting::kernel_fit::fit_profile`
//! fits — the same path for every backend and for a file measured elsewhere. The CPU's plan is
//! [`Plan::for_units`]; the CUDA backend's, [`super::grid::measurement_plan`], adds messages
//! between every pair of GPUs, collectives and a time budget ([`super::budget`]).

use serde::Serialize;

use super::budget::{Budget, Guard};
use crate::backend::predict::{unit_work, Work};
use crate::backend::unit::device::Link;
use crate::backend::unit::{ExecMethod, RunSpec, Shape, Unit, WeightExchange};
use crate::backend::{AttnCall, Backend, GemmShape, Pass};
use crate::error::Result;
use crate::fitting::measurements::{
    AttentionSample, CollectiveSample, CopySample, GemmSample, KernelMeasurements, OverlapSample,
    P2pSample,
};

/// The measurements of one calibration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// GEMM shapes, in measurement order.
    pub gemms: Vec<GemmShape>,
    /// Attention calls (each timed forward and, unless the backend runs forward only,
    /// backward).
    pub attention: Vec<AttnCall>,
    /// Element-wise pass sizes, in bytes moved (read and write).
    pub elementwise_bytes: Vec<u64>,
    /// Copy sizes, in bytes moved (the best rate is the memory bandwidth).
    pub copy_bytes: Vec<u64>,
    /// Message sizes between devices 0 and 1 (or through the backend's `transfer_s`).
    pub transfer_bytes: Vec<u64>,
    /// Message sizes between every other pair of devices, where the backend has them.
    pub pair_bytes: Vec<u64>,
    /// Collective buffer sizes (nccl-tests' S), where the backend has collectives.
    pub collective_bytes: Vec<u64>,
    /// Rank counts of the collectives.
    pub collective_ranks: Vec<usize>,
    /// The GEMM and message size of the slowdown measurement, and how many samples.
    pub slowdown: (GemmShape, u64, usize),
    /// Units to run and compare with the prediction.
    pub units: Vec<RunSpec>,
    /// The time guard of the measurements (none: measure everything; a failure is an error).
    #[serde(skip)]
    pub budget: Option<Budget>,
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

impl Plan {
    /// The mock backend's plan (`backend::mock`): one that determines every fitted parameter
    /// of its truth's kernel model (`MockBackend::truth_profile`): GEMMs of one to many tiles
    /// and short to long k, attention calls with 1 to 64 blocks of 8 to 128 pairs,
    /// memory-bound kernels over three decades; plus one METP attention and one MLP unit.
    pub fn for_mock() -> Plan {
        let shape = Shape {
            b: 1,
            s: 64,
            h: 32,
            a: 4,
            f: 128,
            p: 2,
        };
        let mut att = RunSpec::new(Unit::Attention, ExecMethod::Metp, shape);
        att.metp.weight_exchange = WeightExchange::Broadcast;
        Plan {
            gemms: vec![
                GemmShape::new(8, 8, 8),
                GemmShape::new(32, 32, 32),
                GemmShape::new(128, 128, 128),
                GemmShape::new(128, 128, 8),
                GemmShape::new(8, 16, 512),
                GemmShape::new(64, 256, 32),
            ],
            attention: vec![
                AttnCall::block(1, 16, 1, 8),
                AttnCall::block(1, 64, 1, 8),
                AttnCall::block(2, 32, 4, 8),
                AttnCall::block(1, 128, 2, 16),
                AttnCall::block(4, 8, 8, 8),
            ],
            elementwise_bytes: vec![4096, 65536, 1 << 20],
            copy_bytes: vec![1 << 12, 1 << 20],
            transfer_bytes: vec![1024, 16384, 1 << 20],
            pair_bytes: Vec::new(),
            collective_bytes: Vec::new(),
            collective_ranks: Vec::new(),
            slowdown: (GemmShape::new(32, 32, 32), 4096, 3),
            units: vec![att, RunSpec::new(Unit::Mlp, ExecMethod::Metp, shape)],
            budget: None,
        }
    }

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
            pair_bytes: Vec::new(),
            collective_bytes: Vec::new(),
            collective_ranks: Vec::new(),
            slowdown: (slow_gemm, cap.min(1 << 20), if quick { 3 } else { 5 }),
            units,
            budget: None,
        }
    }
}

/// Most devices the pairwise measurements look for: a node's GPUs.
pub const NODE_DEVICES: usize = 8;

/// What [`measure`] produced.
#[derive(Debug, Clone)]
pub struct MeasureRun {
    /// The measurement file.
    pub measurements: KernelMeasurements,
    /// Measurements left out under the plan's budget, one line each ("skipped for time: …",
    /// "failed: …"); empty without a budget.
    pub skipped: Vec<String>,
    /// Seconds measuring took.
    pub elapsed_s: f64,
}

/// The device's name from a backend's description ("NVIDIA H200 (GPU 0 of 1; …)" → "NVIDIA
/// H200").
fn device_name(description: &str) -> String {
    description
        .split(" (")
        .next()
        .unwrap_or(description)
        .to_string()
}

/// Runs the plan's kernel and link measurements (not the units) on `backend` into a
/// measurement file, under the plan's budget if it has one ([`super::budget`]: what does not
/// fit is skipped and listed). `progress` is told what is being measured.
pub fn measure(
    backend: &mut dyn Backend,
    plan: &Plan,
    date: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<MeasureRun> {
    let mut g = Guard::new(plan.budget);
    let description = backend.device();
    let mut m = KernelMeasurements {
        sm_count: backend.sm_count(),
        timing: Some(backend.timing()),
        ..KernelMeasurements::empty(
            "",
            date,
            &device_name(&description),
            &format!(
                "metp-sim {} {} backend",
                env!("CARGO_PKG_VERSION"),
                backend.name()
            ),
        )
    };

    // ---- host overhead, copies and element-wise passes ----
    g.enter(0);
    progress("host overhead, copies and element-wise passes");
    match backend.host_overhead_s() {
        Ok(t) => m.eager_op_s = t,
        Err(e) => g.failed("host overhead", e)?,
    }
    // The backend is asked by bytes moved (read + write); the file records the buffer (half).
    let mut sizes: Vec<u64> = plan
        .copy_bytes
        .iter()
        .chain(&plan.elementwise_bytes)
        .copied()
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    for n in sizes {
        let (copy, mul) = (
            plan.copy_bytes.contains(&n),
            plan.elementwise_bytes.contains(&n),
        );
        let what = format!("copy or element-wise pass moving {n} bytes");
        let passes = (copy as usize + mul as usize) as f64;
        if !g.fits(&what, |b| {
            passes * b.measurement_s(b.prior.call_s + n as f64 / b.prior.copy_bytes_per_s)
        }) {
            continue;
        }
        let copy_s = copy.then(|| backend.copy_s(n)).transpose();
        let mul_s = mul.then(|| backend.elementwise_s(n)).transpose();
        match (copy_s, mul_s) {
            (Ok(copy_s), Ok(mul_s)) => {
                g.ok();
                m.copy.push(CopySample {
                    bytes: (n / 2).max(1),
                    copy_s,
                    mul_s,
                });
            }
            (Err(e), _) | (_, Err(e)) => g.failed(&what, e)?,
        }
    }

    // ---- GEMMs ----
    g.enter(1);
    progress(&format!("{} GEMM shapes", plan.gemms.len()));
    let mut gemm_rate: f64 = 0.0;
    for &shape in &plan.gemms {
        let what = format!("gemm {}x{}x{}", shape.m, shape.n, shape.k);
        if !g.fits(&what, |b| {
            let rate = if gemm_rate > 0.0 {
                gemm_rate
            } else {
                b.prior.gemm_flops_per_s
            };
            b.measurement_s(b.prior.call_s + shape.flops() / rate)
        }) {
            continue;
        }
        match backend.gemm_s(shape) {
            Ok(s) => {
                g.ok();
                gemm_rate = gemm_rate.max(shape.flops() / s);
                m.gemm.push(GemmSample {
                    m: shape.m as u64,
                    n: shape.n as u64,
                    k: shape.k as u64,
                    flops: Some(shape.flops()),
                    s,
                    session: None,
                });
            }
            Err(e) => g.failed(&what, e)?,
        }
    }

    // ---- attention ----
    g.enter(2);
    let backward = !backend.forward_only();
    progress(&format!(
        "{} attention calls, forward{}",
        plan.attention.len(),
        if backward { " and backward" } else { "" }
    ));
    let (mut fwd_rate, mut bwd_rate): (f64, f64) = (0.0, 0.0);
    for call in &plan.attention {
        let what = format!(
            "attention b={} heads={} q={} kv={} d={}{}",
            call.batch,
            call.heads,
            call.q_tokens,
            call.kv_tokens,
            call.head_dim,
            if call.causal { " causal" } else { "" }
        );
        if !g.fits(&what, |b| {
            let rate = |r: f64, prior: f64| if r > 0.0 { r } else { prior };
            let fwd = b.measurement_s(b.attention_call_s(
                call,
                Pass::Forward,
                rate(fwd_rate, b.prior.attn_fwd_flops_per_s),
            ));
            let bwd = b.measurement_s(b.attention_call_s(
                call,
                Pass::Backward,
                rate(bwd_rate, b.prior.attn_bwd_flops_per_s),
            ));
            fwd + if backward { bwd } else { 0.0 }
        }) {
            continue;
        }
        let fwd = backend.attention_s(*call, Pass::Forward);
        let bwd = backward
            .then(|| backend.attention_s(*call, Pass::Backward))
            .transpose();
        match (fwd, bwd) {
            (Ok(fwd_s), Ok(bwd_s)) => {
                g.ok();
                fwd_rate = fwd_rate.max(call.flops(Pass::Forward) / fwd_s);
                if let Some(b) = bwd_s {
                    bwd_rate = bwd_rate.max(call.flops(Pass::Backward) / b);
                }
                m.attention.push(AttentionSample {
                    b: call.batch as u64,
                    heads: call.heads as u64,
                    kv_heads: None,
                    s: None,
                    q_tokens: Some(call.q_tokens as u64),
                    kv_tokens: Some(call.kv_tokens as u64),
                    head_dim: Some(call.head_dim as u64),
                    causal: call.causal,
                    fwd_flops: Some(call.flops(Pass::Forward)),
                    fwd_s,
                    bwd_s,
                });
            }
            (Err(e), _) | (_, Err(e)) => g.failed(&what, e)?,
        }
    }

    // ---- links: messages, collectives, slowdown ----
    g.enter(3);
    progress("messages, collectives and the slowdown under traffic");
    measure_links(backend, plan, &mut g, &mut m)?;

    let elapsed_s = g.elapsed_s();
    m.what = format!(
        "Kernel timings measured by `metp-sim calibrate --backend {}` on {description}. {}",
        backend.name(),
        backend.measurement_note()
    );
    if let Some(b) = g.budget() {
        m.what.push_str(&format!(
            " Measuring took {elapsed_s:.1} s of a {:.0} s budget; {} measurements were left \
             out (listed by the calibrate report).",
            b.seconds,
            g.skipped.len()
        ));
    }
    Ok(MeasureRun {
        measurements: m,
        skipped: g.skipped,
        elapsed_s,
    })
}

/// Messages between devices 0 and 1 (the backend's point-to-point path, or its `transfer_s`),
/// then — when there is a point-to-point path — between every other pair and collectives, and
/// the GEMM slowdown under traffic.
fn measure_links(
    backend: &mut dyn Backend,
    plan: &Plan,
    g: &mut Guard,
    m: &mut KernelMeasurements,
) -> Result<()> {
    let message_s = |b: &Budget, bytes: u64| {
        b.measurement_s(b.prior.call_s + bytes as f64 / b.prior.link_bytes_per_s)
    };
    let p2p_via = backend.p2p_via().map(str::to_string);
    let transfer_via = backend.transfer_via().map(str::to_string);
    let mut pairs = false;
    for &bytes in &plan.transfer_bytes {
        let what = format!("message of {bytes} bytes between devices 0 and 1");
        if !g.fits(&what, |b| message_s(b, bytes)) {
            continue;
        }
        let sample = match backend.p2p_s(0, 1, bytes) {
            Ok(Some(s)) => {
                pairs = true;
                Ok((s, p2p_via.clone()))
            }
            Ok(None) => backend.transfer_s(bytes).map(|s| (s, transfer_via.clone())),
            Err(e) => Err(e),
        };
        match sample {
            Ok((s, via)) => {
                g.ok();
                m.p2p.push(P2pSample {
                    from: 0,
                    to: 1,
                    bytes,
                    s,
                    via,
                    ranks: None,
                });
            }
            Err(e) => g.failed(&what, e)?,
        }
    }
    if pairs {
        // Every pair of a node's GPUs, whatever the units' device count (the backend answers
        // `None` for a device it does not have).
        'pairs: for from in 0..NODE_DEVICES {
            for to in 0..NODE_DEVICES {
                if from == to || (from, to) == (0, 1) {
                    continue;
                }
                for &bytes in &plan.pair_bytes {
                    let what = format!("message of {bytes} bytes from device {from} to {to}");
                    if !g.fits(&what, |b| message_s(b, bytes)) {
                        break 'pairs;
                    }
                    match backend.p2p_s(from, to, bytes) {
                        Ok(Some(s)) => {
                            g.ok();
                            m.p2p.push(P2pSample {
                                from: from as u32,
                                to: to as u32,
                                bytes,
                                s,
                                via: p2p_via.clone(),
                                ranks: None,
                            });
                        }
                        Ok(None) => {}
                        Err(e) => g.failed(&what, e)?,
                    }
                }
            }
        }
        for &ranks in &plan.collective_ranks {
            for op in crate::backend::busbw::OPS {
                for &bytes in &plan.collective_bytes {
                    let what = format!("{op} of {bytes} bytes over {ranks} devices");
                    if !g.fits(&what, |b| message_s(b, 2 * bytes)) {
                        continue;
                    }
                    match backend.collective_s(op, ranks, bytes) {
                        Ok(Some(s)) => {
                            g.ok();
                            m.collectives.push(CollectiveSample {
                                op: op.to_string(),
                                ranks: ranks as u32,
                                bytes,
                                s,
                                bus_bytes_per_s: Some(crate::backend::busbw::bus_bytes_per_s(
                                    op, ranks, bytes, s,
                                )?),
                            });
                        }
                        Ok(None) => {}
                        Err(e) => g.failed(&what, e)?,
                    }
                }
            }
        }
    }
    let (gemm, bytes, samples) = plan.slowdown;
    for _ in 0..samples {
        let what = format!("gemm {}x{}x{} under traffic", gemm.m, gemm.n, gemm.k);
        if !g.fits(&what, |b| {
            2.0 * b.measurement_s(b.prior.call_s + gemm.flops() / b.prior.gemm_flops_per_s)
        }) {
            break;
        }
        let sample = match backend.slowdown_under_collective(gemm, bytes) {
            Ok(Some(s)) => Ok((s, p2p_via.as_ref().map(|v| format!("{v} all-reduce")))),
            Ok(None) => backend
                .slowdown(gemm, bytes)
                .map(|s| (s, transfer_via.clone())),
            Err(e) => Err(e),
        };
        match sample {
            Ok((s, via)) => {
                g.ok();
                m.overlap.push(OverlapSample {
                    m: gemm.m as u64,
                    n: gemm.n as u64,
                    k: gemm.k as u64,
                    traffic_bytes: bytes,
                    via,
                    alone_s: s.alone_s,
                    with_traffic_s: s.with_transfer_s,
                });
            }
            Err(e) => g.failed(&what, e)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::mock::MockBackend;

    fn budgeted(mut plan: Plan, seconds: f64) -> Plan {
        plan.budget = Some(Budget {
            seconds,
            prior: crate::calibrate::grid::PRIOR,
            quick: true,
        });
        plan
    }

    #[test]
    fn calib_a_budgeted_plan_is_measured_whole_when_it_fits() {
        let mut b = MockBackend::new(MockBackend::truth_profile());
        // The mock's times follow a small profile, not a GPU: give it all the time it needs.
        let plan = budgeted(Plan::for_units(default_units(2, true), true, None), 1e9);
        let run = measure(&mut b, &plan, "2026-11-30", &mut |_| {}).unwrap();
        let m = &run.measurements;
        m.validate(std::path::Path::new("mock")).unwrap();
        assert_eq!(m.gemm.len(), plan.gemms.len(), "{:?}", run.skipped);
        assert_eq!(m.attention.len(), plan.attention.len());
        assert!(m.attention.iter().all(|a| a.bwd_s.is_some()));
        assert_eq!(m.overlap.len(), plan.slowdown.2);
        assert!(run.skipped.is_empty(), "{:?}", run.skipped);
        assert!(m.what.contains("0 measurements were left out"));
    }

    #[test]
    fn calib_a_budget_skips_what_does_not_fit_and_says_so() {
        let mut b = MockBackend::new(MockBackend::truth_profile());
        // No time at all: everything is skipped, and each is listed.
        let plan = budgeted(Plan::for_units(default_units(2, true), true, None), 0.0);
        let run = measure(&mut b, &plan, "2026-11-30", &mut |_| {}).unwrap();
        assert!(run.measurements.gemm.is_empty());
        assert!(run
            .skipped
            .iter()
            .any(|s| s.starts_with("skipped for time: gemm 16x16x16")));
        assert!(run
            .measurements
            .what
            .contains(&format!("{} measurements were left out", run.skipped.len())));
    }
}
