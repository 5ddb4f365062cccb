//! Measures a [`Grid`] on any [`Backend`] into a [`KernelMeasurements`] file ([`measure`])
//! under the grid's time budget, and tells whether the best GEMM rate is a plateau
//! ([`plateau_statement`]). Always built: tested on the mock backend.
//!
//! **The time guard**: each kind of measurement gets a share of the budget; before each
//! measurement its time is estimated from the fastest rate measured so far for its kind (or the
//! grid's stated prior) and the repetitions the backend will run ([`super::grid::repetitions`]);
//! a measurement that would end past its kind's deadline is skipped and listed in
//! [`GridRun::skipped`] ("skipped for time: …"), as is one that fails (with its error). Timing
//! itself is the backend's: CUDA events around each call after a synchronisation, warm-ups,
//! the median of the repetitions.
//!
//! Depends on `calibrate` (backend, measurements), `error`.

use std::time::Instant;

use super::busbw;
use super::grid::{attn_call_s, measurement_s, Grid, MAX_GPUS, PRIOR, SHARES};
use crate::calibrate::backend::{Backend, Pass};
use crate::calibrate::measurements::{
    AttentionSample, CollectiveSample, CopySample, GemmSample, KernelMeasurements, OverlapSample,
    P2pSample,
};
use crate::error::{Error, Result};

/// What [`measure`] produced.
#[derive(Debug, Clone)]
pub struct GridRun {
    /// The measurement file.
    pub measurements: KernelMeasurements,
    /// Measurements left out, one line each ("skipped for time: …", "failed: …").
    pub skipped: Vec<String>,
    /// Seconds measuring took.
    pub elapsed_s: f64,
}

/// Running state of [`measure`]: the clock, the kind deadlines, the fastest rates so far.
struct Guard {
    start: Instant,
    budget_s: f64,
    quick: bool,
    kind: usize,
    skipped: Vec<String>,
    failures_in_a_row: usize,
}

impl Guard {
    fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Moves to kind `k` of [`SHARES`].
    fn enter(&mut self, k: usize) {
        self.kind = k;
    }

    /// The deadline of the current kind: its share and every earlier one's.
    fn deadline(&self) -> f64 {
        self.budget_s * SHARES[..=self.kind].iter().map(|s| s.1).sum::<f64>()
    }

    /// Whether a measurement estimated at `est_s` fits; records it as skipped if not.
    fn fits(&mut self, what: &str, est_s: f64) -> bool {
        if self.elapsed() + est_s <= self.deadline() {
            true
        } else {
            self.skipped.push(format!(
                "skipped for time: {what} (estimated {est_s:.2} s; {} budget ends at {:.0} s)",
                SHARES[self.kind].0,
                self.deadline()
            ));
            false
        }
    }

    /// Records a failed measurement; errors out after 5 failures in a row (the device is
    /// probably gone).
    fn failed(&mut self, what: &str, e: &Error) -> Result<()> {
        self.skipped.push(format!("failed: {what}: {e}"));
        self.failures_in_a_row += 1;
        if self.failures_in_a_row >= 5 {
            return Err(Error::Calibration {
                message: format!("5 measurements failed in a row, the last one {what}: {e}"),
            });
        }
        Ok(())
    }

    fn ok(&mut self) {
        self.failures_in_a_row = 0;
    }

    fn measurement_s(&self, call_s: f64) -> f64 {
        measurement_s(call_s, self.quick)
    }
}

/// The GPU's name from a backend's description ("NVIDIA H200 (GPU 0 of 1; …)" → "NVIDIA H200").
fn device_name(description: &str) -> String {
    description
        .split(" (")
        .next()
        .unwrap_or(description)
        .to_string()
}

/// Measures `grid` on `backend` into a measurement file; see the module docs for the time
/// guard. `date` is `YYYY-MM-DD`; `progress` is told what is being measured.
pub fn measure(
    backend: &mut dyn Backend,
    grid: &Grid,
    quick: bool,
    date: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<GridRun> {
    let mut g = Guard {
        start: Instant::now(),
        budget_s: grid.budget_s,
        quick,
        kind: 0,
        skipped: Vec::new(),
        failures_in_a_row: 0,
    };
    let description = backend.device();
    let mut m = KernelMeasurements {
        what: String::new(),
        date: date.to_string(),
        device: device_name(&description),
        software: format!(
            "metp-sim {} {} backend (cuBLAS GEMMs, own NVRTC FlashAttention-2-style kernels, NCCL)",
            env!("CARGO_PKG_VERSION"),
            backend.name()
        ),
        sm_count: backend.sm_count(),
        gemm: vec![],
        attention: vec![],
        copy: vec![],
        eager_op_s: None,
        p2p: vec![],
        collectives: vec![],
        overlap: vec![],
    };

    // ---- host overhead, copies and element-wise passes ----
    g.enter(0);
    progress("host overhead, copies and element-wise passes");
    match backend.host_overhead_s() {
        Ok(t) => m.eager_op_s = t,
        Err(e) => g.failed("host overhead", &e)?,
    }
    for &bytes in &grid.copy_bytes {
        let est = 2.0 * g.measurement_s(PRIOR.call_s + 2.0 * bytes as f64 / PRIOR.copy_bytes_per_s);
        let what = format!("copy and element-wise pass of {bytes} bytes");
        if !g.fits(&what, est) {
            continue;
        }
        // The trait counts the bytes a pass moves (read and write); the file the buffer.
        let copy = backend.copy_s(2 * bytes);
        let mul = backend.elementwise_s(2 * bytes);
        match (copy, mul) {
            (Ok(c), Ok(e)) => {
                g.ok();
                m.copy.push(CopySample {
                    bytes,
                    copy_s: Some(c),
                    mul_s: Some(e),
                });
            }
            (Err(e), _) | (_, Err(e)) => g.failed(&what, &e)?,
        }
    }

    // ---- GEMMs ----
    g.enter(1);
    progress(&format!("{} GEMM shapes", grid.gemms.len()));
    let mut gemm_rate: f64 = 0.0;
    for &shape in &grid.gemms {
        let rate = if gemm_rate > 0.0 {
            gemm_rate
        } else {
            PRIOR.gemm_flops_per_s
        };
        let est = g.measurement_s(PRIOR.call_s + shape.flops() / rate);
        let what = format!("gemm {}x{}x{}", shape.m, shape.n, shape.k);
        if !g.fits(&what, est) {
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
                });
            }
            Err(e) => g.failed(&what, &e)?,
        }
    }

    // ---- attention ----
    g.enter(2);
    progress(&format!(
        "{} attention calls, forward and backward",
        grid.attention.len()
    ));
    let (mut fwd_rate, mut bwd_rate): (f64, f64) = (0.0, 0.0);
    for call in &grid.attention {
        let fr = if fwd_rate > 0.0 {
            fwd_rate
        } else {
            PRIOR.attn_fwd_flops_per_s
        };
        let br = if bwd_rate > 0.0 {
            bwd_rate
        } else {
            PRIOR.attn_bwd_flops_per_s
        };
        let est = g.measurement_s(attn_call_s(call, Pass::Forward, fr))
            + g.measurement_s(attn_call_s(call, Pass::Backward, br));
        let what = format!(
            "attention b={} heads={} q={} kv={} d={}{}",
            call.batch,
            call.heads,
            call.q_tokens,
            call.kv_tokens,
            call.head_dim,
            if call.causal { " causal" } else { "" }
        );
        if !g.fits(&what, est) {
            continue;
        }
        let fwd = backend.attention_s(*call, Pass::Forward);
        let bwd = backend.attention_s(*call, Pass::Backward);
        match (fwd, bwd) {
            (Ok(f), Ok(b)) => {
                g.ok();
                fwd_rate = fwd_rate.max(call.forward_flops() / f);
                bwd_rate = bwd_rate.max(2.5 * call.forward_flops() / b);
                let square = call.q_tokens == call.kv_tokens;
                m.attention.push(AttentionSample {
                    b: call.batch as u64,
                    heads: call.heads as u64,
                    kv_heads: None,
                    s: square.then_some(call.q_tokens as u64),
                    q_tokens: (!square).then_some(call.q_tokens as u64),
                    kv_tokens: (!square).then_some(call.kv_tokens as u64),
                    head_dim: Some(call.head_dim as u64),
                    causal: call.causal,
                    fwd_flops: Some(call.forward_flops()),
                    fwd_s: f,
                    bwd_s: Some(b),
                });
            }
            (Err(e), _) | (_, Err(e)) => g.failed(&what, &e)?,
        }
    }

    // ---- links: messages, collectives, slowdown ----
    g.enter(3);
    progress("messages, collectives and the slowdown under traffic");
    let mut multi_gpu = false;
    for &bytes in &grid.transfer_bytes {
        let est = g.measurement_s(PRIOR.call_s + bytes as f64 / PRIOR.link_bytes_per_s);
        let what = format!("message of {bytes} bytes between GPUs 0 and 1");
        if !g.fits(&what, est) {
            continue;
        }
        match backend.p2p_s(0, 1, bytes) {
            Ok(Some(s)) => {
                g.ok();
                multi_gpu = true;
                m.p2p.push(P2pSample {
                    from: 0,
                    to: 1,
                    bytes,
                    s,
                    via: Some("nccl".into()),
                });
            }
            Ok(None) => match backend.transfer_s(bytes) {
                Ok(s) => {
                    g.ok();
                    m.p2p.push(P2pSample {
                        from: 0,
                        to: 0,
                        bytes,
                        s,
                        via: Some("copy-emulation".into()),
                    });
                }
                Err(e) => g.failed(&what, &e)?,
            },
            Err(e) => g.failed(&what, &e)?,
        }
    }
    if multi_gpu {
        'pairs: for from in 0..MAX_GPUS {
            for to in 0..MAX_GPUS {
                if from == to || (from, to) == (0, 1) {
                    continue;
                }
                for &bytes in &grid.pair_bytes {
                    let est = g.measurement_s(PRIOR.call_s + bytes as f64 / PRIOR.link_bytes_per_s);
                    let what = format!("message of {bytes} bytes from GPU {from} to GPU {to}");
                    if !g.fits(&what, est) {
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
                                via: Some("nccl".into()),
                            });
                        }
                        Ok(None) => {}
                        Err(e) => g.failed(&what, &e)?,
                    }
                }
            }
        }
        for &ranks in &grid.collective_ranks {
            for op in busbw::OPS {
                for &bytes in &grid.collective_bytes {
                    let est =
                        g.measurement_s(PRIOR.call_s + 2.0 * bytes as f64 / PRIOR.link_bytes_per_s);
                    let what = format!("{op} of {bytes} bytes over {ranks} GPUs");
                    if !g.fits(&what, est) {
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
                                bus_bytes_per_s: Some(busbw::bus_bytes_per_s(op, ranks, bytes, s)?),
                            });
                        }
                        Ok(None) => {}
                        Err(e) => g.failed(&what, &e)?,
                    }
                }
            }
        }
    }
    let (gemm, bytes, samples) = grid.overlap;
    for _ in 0..samples {
        let est = 2.0 * g.measurement_s(PRIOR.call_s + gemm.flops() / PRIOR.gemm_flops_per_s);
        let what = format!("gemm {}x{}x{} under traffic", gemm.m, gemm.n, gemm.k);
        if !g.fits(&what, est) {
            break;
        }
        let sample = match backend.slowdown_under_collective(gemm, bytes) {
            Ok(Some(s)) => Ok((s, "nccl all-reduce")),
            Ok(None) => backend.slowdown(gemm, bytes).map(|s| (s, "copy-emulation")),
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
                    via: Some(via.into()),
                    alone_s: s.alone_s,
                    with_traffic_s: s.with_transfer_s,
                });
            }
            Err(e) => g.failed(&what, &e)?,
        }
    }

    let elapsed_s = g.elapsed();
    m.what = format!(
        "Kernel timings measured by `metp-sim calibrate --backend {name}` on {description}. \
         Each time is the median of repetitions (3 to 25, fewer for longer calls) after 1–2 \
         warm-ups; each call is timed alone with CUDA events (CU_EVENT_DEFAULT) recorded \
         around it after the stream was synchronised, so its launch is included. GEMMs: bf16 \
         cuBLAS gemm_ex with fp32 accumulation, row-major m×k by k×n. Attention: the backend's \
         own FlashAttention-2-style kernel (bf16 tensor-core MMA, fp32 accumulation, online \
         softmax, log-sum-exp output); 'fwd_flops' counts 4·b·heads·d per visible (query, key) \
         pair (causal: bottom-right aligned); 'bwd_s' is the backward kernels alone (the \
         D = rowsum(dO∘O) pre-pass and the fused backward), not forward+backward minus forward. \
         Copies: device-to-device cuMemcpy of 'bytes'; 'mul_s': an element-wise scale of a bf16 \
         buffer of 'bytes' into another. 'eager_op_s': host time to issue one kernel launch \
         (this runtime's per-op overhead, not a framework's). p2p 'via: nccl': NCCL send/recv \
         between two GPUs of one process; 'via: copy-emulation': one GPU only, a \
         device-to-device copy on a second stream (HBM bandwidth, not a link). Collectives: \
         NCCL over the first 'ranks' GPUs, 'bytes' and 'bus_bytes_per_s' as nccl-tests define \
         them. Overlap: the GEMM alone and while the traffic runs ('copy-emulation': copies on \
         a second stream of the same GPU). Measuring took {elapsed_s:.1} s of a {budget:.0} s \
         budget; {skipped} measurements were left out (listed by the calibrate report).",
        name = backend.name(),
        budget = grid.budget_s,
        skipped = g.skipped.len(),
    );
    Ok(GridRun {
        measurements: m,
        skipped: g.skipped,
        elapsed_s,
    })
}

/// Whether the best GEMM rate was measured on the plateau: the best rate among the three
/// largest GEMMs (by FLOPs) is within `tolerance` of the best rate overall and the largest
/// two are within `tolerance` of each other. Returns the statement for the profile.
pub fn plateau_statement(m: &KernelMeasurements, tolerance: f64) -> String {
    let mut rates: Vec<(f64, f64)> = m
        .gemm
        .iter()
        .map(|g| {
            let f = 2.0 * g.m as f64 * g.n as f64 * g.k as f64;
            (f, f / g.s)
        })
        .collect();
    if rates.len() < 3 {
        return "the peak is the best GEMM rate measured; too few GEMMs to tell whether it \
                is the plateau"
            .into();
    }
    rates.sort_by(|a, b| a.0.total_cmp(&b.0));
    let best = rates.iter().map(|r| r.1).fold(0.0, f64::max);
    let n = rates.len();
    let top: Vec<f64> = rates[n - 3..].iter().map(|r| r.1).collect();
    let top_best = top.iter().cloned().fold(0.0, f64::max);
    let flat = (top[2] - top[1]).abs() <= tolerance * top[2];
    if top_best >= (1.0 - tolerance) * best && flat {
        format!(
            "the peak {best:.3e} FLOP/s is the best GEMM rate measured, and it is the plateau: \
             the largest GEMMs ({:.2e} and {:.2e} FLOPs) ran within {:.0}% of each other",
            rates[n - 2].0,
            rates[n - 1].0,
            100.0 * tolerance
        )
    } else {
        format!(
            "the peak {best:.3e} FLOP/s is the best GEMM rate measured but NOT a plateau: the \
             largest GEMMs ran at {:.3e} and {:.3e} FLOP/s — larger sizes would be faster",
            top[1], top[2]
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::grid::measurement_grid;
    use super::*;
    use crate::calibrate::mock::MockBackend;

    #[test]
    fn calib_grid_runner_writes_a_valid_file_on_the_mock() {
        let mut b = MockBackend::new(MockBackend::truth_profile());
        // The mock's times follow a small profile, not a GPU: give it all the time it needs.
        let mut grid = measurement_grid(true);
        grid.budget_s = 1e9;
        let run = measure(&mut b, &grid, true, "2026-11-30", &mut |_| {}).unwrap();
        let m = &run.measurements;
        m.validate(std::path::Path::new("mock")).unwrap();
        assert_eq!(m.gemm.len(), grid.gemms.len(), "{:?}", run.skipped);
        assert_eq!(m.attention.len(), grid.attention.len());
        assert!(m.attention.iter().all(|a| a.bwd_s.is_some()));
        assert_eq!(m.copy.len(), grid.copy_bytes.len());
        // The mock has no GPUs to pair: messages are the backend's transfers, labelled.
        assert!(m
            .p2p
            .iter()
            .all(|p| p.via.as_deref() == Some("copy-emulation")));
        assert_eq!(m.overlap.len(), grid.overlap.2);
        assert!(run.skipped.is_empty(), "{:?}", run.skipped);
    }

    #[test]
    fn calib_grid_runner_skips_what_does_not_fit_and_says_so() {
        let mut b = MockBackend::new(MockBackend::truth_profile());
        let mut grid = measurement_grid(true);
        // No time at all: everything is skipped, and each is listed.
        grid.budget_s = 0.0;
        let run = measure(&mut b, &grid, true, "2026-11-30", &mut |_| {}).unwrap();
        assert!(run.measurements.gemm.is_empty());
        assert!(run
            .skipped
            .iter()
            .any(|s| s.starts_with("skipped for time: gemm 4096x4096x4096")));
        assert!(run.measurements.what.contains("were left out"));
    }

    #[test]
    fn calib_plateau_statement_tells_a_plateau_from_a_ramp() {
        let mut m = KernelMeasurements::read(
            &std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("hardware-profiles/measurements/h200-pytorch-2026-11-30.json"),
        )
        .unwrap();
        // The shared H200 file: 4096³ at 735 and 8192³ at 793 TFLOP/s — 7% apart.
        assert!(plateau_statement(&m, 0.10).contains("it is the plateau"));
        assert!(plateau_statement(&m, 0.05).contains("NOT a plateau"));
        // Only small GEMMs (the 2.7·10⁸-FLOP calls): not a plateau.
        m.gemm.truncate(2);
        assert!(plateau_statement(&m, 0.10).contains("too few"));
    }
}
