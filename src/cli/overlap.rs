//! `metp-sim overlap`: METP's full-overlap condition in closed form, and the simulator's
//! exposed communication on either side of it.

use clap::Args;
use serde::Serialize;

use super::args::{single_degree, CommonArgs};
use super::simulate::LinkModelArg;
use crate::analytic::{self, SolvedThresholds, Thresholds};
use crate::config::{parse_seq_spec, MethodId, Workload};
use crate::error::{Error, Result};
use crate::report::{self, Format, Table};
use crate::schedule::{Pass, Stream};
use crate::sim::{self, Track};

#[derive(Debug, Args)]
pub struct OverlapArgs {
    /// Parallel degree p.
    #[arg(long, default_value = "8")]
    p: String,
    /// Local sequence lengths (tokens per device, s/p) to simulate.
    #[arg(long, default_value = "128..16k")]
    local_seq: String,
    /// Link model for the simulator.
    #[arg(long, value_enum, default_value = "maxmin")]
    link_model: LinkModelArg,
    /// Run kernels as the closed form assumes: no launch overhead, every GEMM and attention
    /// kernel at the profile's best GEMM efficiency, element-wise kernels at full bandwidth.
    #[arg(long)]
    ideal_kernels: bool,
    #[command(flatten)]
    common: CommonArgs,
}

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
    /// Whether the attention ring's simulated exposure agrees with its condition: share below
    /// 2% when it holds, above 2% when it does not; `None` within 25% of the threshold.
    pub attention_agrees: Option<bool>,
    /// The same for the MLP ring.
    pub mlp_agrees: Option<bool>,
    /// Both rings agree (`None` when neither can be judged, `false` if either disagrees).
    pub agrees: Option<bool>,
}

#[derive(Serialize)]
struct Output<'a> {
    model: &'a str,
    hardware: &'a str,
    p: u64,
    causal: bool,
    causal_zigzag: bool,
    threshold_local_seq: ThresholdJson,
    closed_form: &'a Thresholds,
    solved: &'a SolvedThresholds,
    rows: &'a [Row],
}

#[derive(Serialize)]
struct ThresholdJson {
    attention: u64,
    mlp: u64,
}

/// Compute-stream waiting inside forward ring steps of `block` on device 0: gaps before kernels
/// of ring steps k ≥ 1 and the span of those rings.
fn ring_exposure(trace: &sim::Trace, block: &str) -> (f64, f64) {
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
        let in_ring = s.label.pass == Pass::Fwd && s.label.block == block && s.label.step.is_some();
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

/// The kernels the closed form assumes: no launch overhead, the best GEMM efficiency for every
/// GEMM and attention kernel, full HBM bandwidth for element-wise kernels.
fn idealise(w: &mut Workload) {
    let e = &mut w.hardware.efficiency;
    let best = e.gemm.points.iter().map(|&(_, f)| f).fold(0.0, f64::max);
    let note = "idealised by `metp-sim overlap --ideal-kernels`".to_string();
    e.gemm.points = vec![(1.0, best)];
    e.gemm.source = note.clone();
    e.attention.points = vec![(1.0, best)];
    e.attention.source = note.clone();
    e.elementwise.points = vec![(1.0, 1.0)];
    e.elementwise.source = note.clone();
    w.hardware.gpu.kernel_launch_s.value = 0.0;
    w.hardware.gpu.kernel_launch_s.source = note;
}

fn classify(c: u64, threshold: u64, share: f64) -> Option<bool> {
    let (c, t) = (c as f64, threshold as f64);
    if c >= 1.25 * t {
        Some(share < 0.02)
    } else if c <= 0.8 * t {
        Some(share > 0.02)
    } else {
        None
    }
}

pub fn run(a: OverlapArgs) -> Result<String> {
    let p = single_degree(&a.p)?;
    if p < 2 {
        return Err(Error::arg("--p", "the overlap condition needs p ≥ 2"));
    }
    let locals = parse_seq_spec("--local-seq", &a.local_seq)?;
    let mut base: Workload = a.common.workload(MethodId::Metp, p, p * locals[0])?;
    if a.ideal_kernels {
        idealise(&mut base);
    }
    let closed = analytic::thresholds(&base);
    let solved = analytic::solve_thresholds(&base);
    let o = &base.options;
    let attn_threshold = if o.causal && o.causal_zigzag {
        solved.attention_causal_zigzag_local_seq
    } else {
        solved.attention_local_seq
    };
    let mut rows = Vec::new();
    for &c in &locals {
        let mut w = base.clone();
        w.seq = c * p;
        // One layer: every layer repeats the same rings, so one shows the condition.
        w.model.layers = 1;
        let s = sim::simulate_workload(&w, a.link_model.into(), true)?;
        let Some(trace) = s.result.trace.as_ref() else {
            continue;
        };
        let (ae, aspan) = ring_exposure(trace, "attention");
        let (me, mspan) = ring_exposure(trace, "mlp");
        let share = |e: f64, s: f64| if s > 0.0 { e / s } else { 0.0 };
        let a_share = share(ae, aspan);
        let m_share = share(me, mspan);
        let attention_agrees = classify(c, attn_threshold, a_share);
        let mlp_agrees = classify(c * w.micro_batch, solved.mlp_local_seq, m_share);
        let agrees = match (attention_agrees, mlp_agrees) {
            (Some(false), _) | (_, Some(false)) => Some(false),
            (None, None) => None,
            _ => Some(true),
        };
        rows.push(Row {
            seq: w.seq,
            p,
            local_seq: c,
            condition_holds: c >= attn_threshold,
            mlp_condition_holds: c * w.micro_batch >= solved.mlp_local_seq,
            exposed_communication_s: s.critical().exposed_comm_s,
            attention_ring_exposed_s: ae,
            attention_ring_exposed_share: a_share,
            mlp_ring_exposed_s: me,
            mlp_ring_exposed_share: m_share,
            attention_agrees,
            mlp_agrees,
            agrees,
        });
    }
    let out = Output {
        model: &base.model.name,
        hardware: &base.hardware.name,
        p,
        causal: o.causal,
        causal_zigzag: o.causal_zigzag,
        threshold_local_seq: ThresholdJson {
            attention: attn_threshold,
            mlp: solved.mlp_local_seq,
        },
        closed_form: &closed,
        solved: &solved,
        rows: &rows,
    };
    Ok(match a.common.format.into() {
        Format::Json => report::to_json(&out),
        Format::Table | Format::Csv => render(&out),
    })
}

fn render(o: &Output<'_>) -> String {
    let mut s = format!(
        "METP full-overlap condition — {} on {}, p = {}{}\n\n",
        o.model,
        o.hardware,
        o.p,
        if o.causal {
            if o.causal_zigzag {
                ", causal (zig-zag)"
            } else {
                ", causal (contiguous)"
            }
        } else {
            ""
        }
    );
    s.push_str(&format!(
        "closed form (best GEMM efficiency): F = {:.0} TFLOP/s, B = {:.0} GB/s, α = {:.1} µs → F/B = {:.0} tokens\n",
        o.closed_form.flops_per_s / 1e12,
        o.closed_form.bytes_per_s / 1e9,
        o.closed_form.latency_s * 1e6,
        o.closed_form.f_over_b
    ));
    s.push_str(&format!(
        "  attention ring hides its K/V when s/p ≥ {:.0} (causal zig-zag: {:.0}); MLP ring when b·s/p ≥ {:.0}\n",
        o.closed_form.attention_local_seq,
        o.closed_form.attention_causal_zigzag_local_seq,
        o.closed_form.mlp_local_seq
    ));
    s.push_str(&format!(
        "solved with the profile's kernel timings and overlap slowdown: attention s/p ≥ {} (zig-zag {}), MLP s/p ≥ {}\n\n",
        o.solved.attention_local_seq, o.solved.attention_causal_zigzag_local_seq, o.solved.mlp_local_seq
    ));
    let mut t = Table::new(
        &[
            "s/p",
            "s",
            "attn holds",
            "attn ring exposed",
            "mlp holds",
            "mlp ring exposed",
            "agrees",
        ],
        &[true, true, false, true, false, true, false],
    );
    for r in o.rows {
        t.row(vec![
            r.local_seq.to_string(),
            r.seq.to_string(),
            if r.condition_holds { "yes" } else { "no" }.into(),
            format!(
                "{:.3} ms ({:.1}%)",
                r.attention_ring_exposed_s * 1e3,
                100.0 * r.attention_ring_exposed_share
            ),
            if r.mlp_condition_holds { "yes" } else { "no" }.into(),
            format!(
                "{:.3} ms ({:.1}%)",
                r.mlp_ring_exposed_s * 1e3,
                100.0 * r.mlp_ring_exposed_share
            ),
            match r.agrees {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "near threshold",
            }
            .into(),
        ]);
    }
    s.push_str(&t.render());
    s.push_str("\nexposed: compute-stream time waiting inside the forward ring steps of device 0 (one layer simulated)\n");
    s
}
