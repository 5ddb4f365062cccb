//! METP's overlap condition checked against the simulator: for a range of local sequence
//! lengths, the exposed communication inside the forward attention and MLP rings (from the
//! simulator's trace), beside the thresholds solved from the same cost model.

use serde::Serialize;

use crate::analytic::{self, SolvedThresholds, Thresholds};
use crate::config::Workload;
use crate::error::Result;
use crate::evaluate::{Evaluation, SimDepth, SimulateOptions};
use crate::schedule::{Pass, Stream};
use crate::sim::{self, LinkModel, Track};

/// One simulated point.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Sequence length s.
    pub seq: u64,
    /// Degree.
    pub p: u64,
    /// Local tokens s/p.
    pub local_seq: u64,
    /// Whether s/p is at or above the attention ring's solved threshold (the one that applies
    /// to the chosen causal mode).
    pub condition_holds: bool,
    /// Whether s/p is at or above the MLP ring's solved threshold.
    pub mlp_condition_holds: bool,
    /// Exposed communication of the whole simulated layer step (critical device).
    pub exposed_communication_s: f64,
    /// Compute-stream time lost waiting inside the forward attention ring (device 0).
    pub attention_ring_exposed_s: f64,
    /// The same as a share of the forward attention ring's duration.
    pub attention_ring_exposed_share: f64,
    /// Compute-stream time lost waiting inside the forward MLP ring (device 0).
    pub mlp_ring_exposed_s: f64,
    /// The same as a share of the forward MLP ring's duration.
    pub mlp_ring_exposed_share: f64,
    /// Compute-stream time lost waiting inside the backward attention ring (device 0), as a
    /// share of its duration (K/V and fp32 dK/dV travel together).
    pub attention_bwd_ring_exposed_share: f64,
    /// Whether the attention ring's simulated exposure agrees with its condition: share below
    /// 2% when it holds, above 2% when it does not; `None` within 25% of the threshold.
    pub attention_agrees: Option<bool>,
    /// The same for the MLP ring.
    pub mlp_agrees: Option<bool>,
    /// Both rings agree (`None` when neither can be judged, `false` if either disagrees).
    pub agrees: Option<bool>,
}

/// Compute-stream waiting inside forward ring steps of `block` on device 0: gaps before kernels
/// of ring steps k ≥ 1 and the span of those rings.
pub fn ring_exposure(trace: &sim::Trace, block: &str) -> (f64, f64) {
    ring_exposure_in(trace, Pass::Fwd, block)
}

/// [`ring_exposure`] for the rings of pass `pass`.
pub fn ring_exposure_in(trace: &sim::Trace, pass: Pass, block: &str) -> (f64, f64) {
    let mut spans: Vec<&sim::Span> = trace
        .spans
        .iter()
        .filter(|s| {
            matches!(
                s.track,
                Track::Stream {
                    device: 0,
                    stream: Stream::Compute
                }
            )
        })
        .collect();
    spans.sort_by_key(|s| (s.start_ps, s.end_ps));
    let (mut exposed, mut first, mut last) = (0u64, u64::MAX, 0u64);
    let mut prev_end: Option<u64> = None;
    for s in spans {
        let in_ring = s.label.pass == pass && s.label.block == block && s.label.step.is_some();
        if in_ring {
            first = first.min(s.start_ps);
            last = last.max(s.end_ps);
            if s.label.step.unwrap_or(0) > 0 {
                if let Some(pe) = prev_end {
                    exposed += s.start_ps.saturating_sub(pe);
                }
            }
        }
        prev_end = Some(s.end_ps);
    }
    let span = last.saturating_sub(first);
    (sim::ps_to_secs(exposed), sim::ps_to_secs(span))
}

/// The kernels the closed form assumes: no fixed costs (host, launch, per tile, per call, no
/// extra passes), attention at the GEMM's best rate, memory-bound kernels at full bandwidth,
/// and work spread evenly over the SMs (tiles and blocks of one element, so that no wave or
/// under-filled grid costs anything).
pub fn idealise(w: &mut Workload) {
    let k = &mut w.hardware.kernels;
    let note = "idealised by `metp-sim overlap --ideal-kernels`".to_string();
    let best = k.gemm.mma_fraction.value;
    let set = |f: &mut crate::config::Figure, v: f64| {
        f.value = v;
        f.source = note.clone();
    };
    set(&mut k.host.op_s, 0.0);
    set(&mut k.host.isolated_gap_s, 0.0);
    set(&mut k.host.isolated_floor_s, 0.0);
    set(&mut k.memory.latency_s, 0.0);
    set(&mut k.memory.elementwise_fraction, 1.0);
    set(&mut k.gemm.tile_s, 0.0);
    set(&mut k.gemm.tile, 1.0);
    set(&mut k.gemm.k_step, 1.0);
    set(&mut k.gemm.call_s, 0.0);
    k.gemm.power_fraction = None;
    k.gemm.power_time_s = None;
    k.gemm.stream_k = None;
    for a in [&mut k.attention_fwd, &mut k.attention_bwd] {
        a.solo_fraction = None;
        a.max_splits = None;
        a.tiles.clear();
        set(&mut a.mma_fraction, best);
        set(&mut a.block_q, 1.0);
        set(&mut a.block_k, 1.0);
        set(&mut a.ctas_per_sm, 1.0);
        set(&mut a.tile_s, 0.0);
        set(&mut a.call_s, 0.0);
        set(&mut a.extra_bytes_per_element, 0.0);
        set(&mut a.isolated_extra_s, 0.0);
    }
}

/// A ring whose exposed share is below this hides its transfers.
pub const HIDDEN_SHARE: f64 = 0.02;
/// Local lengths within this factor of a threshold (either side) are not judged.
pub const JUDGED_MARGIN: f64 = 1.25;

/// Whether a ring's exposed share agrees with its condition: below [`HIDDEN_SHARE`] at ≥
/// [`JUDGED_MARGIN`] × the threshold, above it at ≤ 1/[`JUDGED_MARGIN`] ×, `None` in between.
pub fn classify(c: u64, threshold: u64, share: f64) -> Option<bool> {
    let (c, t) = (c as f64, threshold as f64);
    if c >= JUDGED_MARGIN * t {
        Some(share < HIDDEN_SHARE)
    } else if c <= t / JUDGED_MARGIN {
        Some(share > HIDDEN_SHARE)
    } else {
        None
    }
}

/// The overlap study of a METP workload (its `seq` is ignored; `local_seqs` are s/p).
#[derive(Debug, Clone, Serialize)]
pub struct Study {
    /// Closed-form thresholds.
    pub closed_form: Thresholds,
    /// Thresholds solved with the profile's kernel timings.
    pub solved: SolvedThresholds,
    /// The attention threshold that applies to the workload's causal mode.
    pub attention_threshold: u64,
    /// Simulated points.
    pub rows: Vec<Row>,
}

/// Runs the study: one simulated layer per local length.
pub fn study(base: &Workload, local_seqs: &[u64], link: LinkModel) -> Result<Study> {
    let p = base.p;
    let closed = analytic::thresholds(base);
    let solved = analytic::solve_thresholds(base);
    let o = &base.options;
    let attn_threshold = if o.causal && o.causal_zigzag {
        solved.attention_causal_zigzag_local_seq
    } else {
        solved.attention_local_seq
    };
    let mut rows = Vec::new();
    for &c in local_seqs {
        let mut w = base.clone();
        w.seq = c * p;
        // One layer: every layer repeats the same rings, so one shows the condition.
        w.model.layers = 1;
        let (seq, micro_batch) = (w.seq, w.micro_batch);
        let e = Evaluation::new(w.validate()?).simulate(SimulateOptions {
            link,
            depth: SimDepth::Full,
            trace: sim::TraceScope::AllDevices,
            // Every device of the ring: the spans below are read device by device.
            devices: crate::schedule::Devices::All,
        })?;
        let Some(s) = e.simulation.and_then(|s| s.run) else {
            continue;
        };
        let Some(trace) = s.result.trace.as_ref() else {
            continue;
        };
        let (ae, aspan) = ring_exposure(trace, "attention");
        let (me, mspan) = ring_exposure(trace, "mlp");
        let (be, bspan) = ring_exposure_in(trace, Pass::Bwd, "attention");
        let share = |e: f64, s: f64| if s > 0.0 { e / s } else { 0.0 };
        let a_share = share(ae, aspan);
        let m_share = share(me, mspan);
        let attention_agrees = classify(c, attn_threshold, a_share);
        let mlp_agrees = classify(c * micro_batch, solved.mlp_local_seq, m_share);
        let agrees = match (attention_agrees, mlp_agrees) {
            (Some(false), _) | (_, Some(false)) => Some(false),
            (None, None) => None,
            _ => Some(true),
        };
        rows.push(Row {
            seq,
            p,
            local_seq: c,
            condition_holds: c >= attn_threshold,
            mlp_condition_holds: c * micro_batch >= solved.mlp_local_seq,
            exposed_communication_s: s.critical().exposed_comm_s,
            attention_ring_exposed_s: ae,
            attention_ring_exposed_share: a_share,
            mlp_ring_exposed_s: me,
            mlp_ring_exposed_share: m_share,
            attention_bwd_ring_exposed_share: share(be, bspan),
            attention_agrees,
            mlp_agrees,
            agrees,
        });
    }
    Ok(Study {
        closed_form: closed,
        solved,
        attention_threshold: attn_threshold,
        rows,
    })
}
