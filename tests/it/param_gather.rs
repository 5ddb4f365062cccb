//! `--param-gather overlapped` (`config::ParamGather`): a sharded optimizer state's updated
//! weights all-gathered during the first micro-batch's forward, one layer ahead, as
//! Megatron-Core's `--overlap-param-gather` runs it — in the lowered graph, against the
//! closed form, shortened and composed, hiding the gathers where the forward is longer and
//! pacing it (and a pipeline's fill) where it is shorter; refused where no such gather exists.

use metp_sim::config::{load_model, MethodId, Options, ParamGather, Runtime, Workload, ZeroStage};
use metp_sim::evaluate::{Evaluation, SimDepth, SimulateOptions};
use metp_sim::schedule::{Pass, TaskGraph, Work};
use metp_sim::sim::LinkModel;

/// LLaMA 2 7B with `layers` layers, TP + SP over 8 GPUs of a node, `dp` replicas on as many
/// nodes (each replica group's gathers cross InfiniBand), `m` micro-batches of `seq` tokens.
fn workload(pp: u64, dp: u64, m: u64, seq: u64, gather: ParamGather) -> Workload {
    let mut model = load_model("llama2-7b").unwrap();
    model.layers = 8;
    let options = Options {
        zero: Some(ZeroStage::Zero1),
        causal: true,
        runtime: Runtime {
            param_gather: gather,
            ..Runtime::default()
        },
        ..Options::default()
    };
    let mut w = crate::common::workload(model, MethodId::TpSp, 8, seq, options);
    w.hardware.nodes = pp * dp;
    w.dp = dp;
    w.outer.pp = pp;
    w.micro_batches = m;
    w
}

/// Device 0's forward compute tasks of `layer` for micro-batch `mb`, by index.
fn forward_computes(g: &TaskGraph, layer: u32, mb: u32) -> Vec<usize> {
    g.tasks
        .iter()
        .enumerate()
        .filter(|(_, t)| {
            t.device == 0
                && t.label.pass == Pass::Fwd
                && t.label.micro_batch == mb
                && t.label.layer == Some(layer)
                && matches!(t.work, Work::Compute { .. })
        })
        .map(|(i, _)| i)
        .collect()
}

/// Device 0's gathers of updated weights, by index, with the layer each gathers.
fn param_gathers(g: &TaskGraph) -> Vec<(usize, u32)> {
    g.tasks
        .iter()
        .enumerate()
        .filter(|(_, t)| t.device == 0 && t.label.name == "param-all-gather")
        .map(|(i, t)| (i, t.label.layer.unwrap()))
        .collect()
}

/// The closed form within 1% of the whole simulation, the shortened step equal to it, the
/// step composed from its distinct programs (`sim::simulate_composed`, called directly: the fast
/// path simulates steps this small exactly) within 1% — measured 0.0–0.6%; 1.8–3.0% if its walk
/// did not wait for each stage's first gather.
fn paths_agree(w: &Workload, label: &str) {
    crate::common::agrees_with_the_analytic_twin(w, label);
    let (whole, _) = step_s(w, SimDepth::Full);
    let (periodic, _) = step_s(w, SimDepth::Periodic);
    assert_eq!(whole, periodic, "{label}: shortened vs whole");
    let v = w.clone().validate().unwrap();
    let plan = metp_sim::schedule::plan(&v);
    let stages = metp_sim::memory::stage_inventories(&v);
    let c = metp_sim::sim::simulate_composed(
        &v,
        &plan,
        &stages,
        LinkModel::MaxMin,
        metp_sim::schedule::Devices::Distinct,
    )
    .unwrap();
    assert!(c.composed.is_some(), "{label}: composed");
    let composed = c.times().step_time_s;
    assert!(
        (composed / whole - 1.0).abs() < 0.01,
        "{label}: composed {composed} vs whole {whole}"
    );
}

fn step_s(w: &Workload, depth: SimDepth) -> (f64, f64) {
    let e = Evaluation::new(w.clone().validate().unwrap())
        .simulate(SimulateOptions {
            depth,
            ..SimulateOptions::full(LinkModel::MaxMin)
        })
        .unwrap();
    (e.metrics.step_time_s, e.estimate.step_time_s)
}

/// In the lowered step each layer's updated weights are gathered once, in the first
/// micro-batch's forward: the first from the step's start (before any compute), each next one
/// after the previous gather and issued before the layer before it computes, and the layer's
/// first kernel waits for its own; no other micro-batch gathers, and nothing is gathered after
/// the optimizer. After the step (the default) there is one gather, after the optimizer.
#[test]
fn overlapped_gathers_run_one_layer_ahead_in_the_first_forward() {
    let w = workload(1, 2, 2, 2048, ParamGather::Overlapped)
        .validate()
        .unwrap();
    let g = crate::common::lowered_step(&w);
    let on0 = |t: &&metp_sim::schedule::Task| t.device == 0;
    let gathers: Vec<(usize, u32)> = g
        .tasks
        .iter()
        .enumerate()
        .filter(|(_, t)| on0(t) && t.label.name == "param-all-gather")
        .map(|(i, t)| {
            assert_eq!((t.label.pass, t.label.micro_batch), (Pass::Fwd, 0));
            (i, t.label.layer.unwrap())
        })
        .collect();
    assert_eq!(
        gathers.iter().map(|g| g.1).collect::<Vec<_>>(),
        (0..8).collect::<Vec<_>>(),
        "one gather per layer, in forward order"
    );
    let computes = |layer: u32, mb: u32| forward_computes(&g, layer, mb);
    let first_compute = g
        .tasks
        .iter()
        .position(|t| t.device == 0 && matches!(t.work, Work::Compute { .. }))
        .unwrap();
    assert!(
        gathers[0].0 < first_compute,
        "the first gather opens the step"
    );
    for (k, &(gather, layer)) in gathers.iter().enumerate() {
        let own = computes(layer, 0);
        assert!(
            g.tasks[own[0]].deps.contains(&(gather as u32)),
            "layer {layer}: its first forward does not wait for its gather"
        );
        // The second micro-batch's forward waits for no gather.
        for t in computes(layer, 1) {
            assert!(!g.tasks[t]
                .deps
                .iter()
                .any(|d| gathers.iter().any(|x| x.0 == *d as usize)));
        }
        if k > 0 {
            let before = computes(gathers[k - 1].1, 0);
            assert!(g.tasks[gather].deps.contains(&(gathers[k - 1].0 as u32)));
            assert!(
                gather < before[0],
                "layer {layer}: issued after the layer before began"
            );
            assert!(
                g.tasks[gather]
                    .deps
                    .iter()
                    .all(|d| !before.contains(&(*d as usize))),
                "layer {layer}: its gather waits for the layer computing beside it"
            );
        }
    }
    // After the step: one collective, after the optimizer, and none in the forward.
    let w = workload(1, 2, 2, 2048, ParamGather::AfterStep)
        .validate()
        .unwrap();
    let plan = metp_sim::schedule::plan(&w);
    assert_eq!(plan.first_forward_gather_bytes, 0);
    assert!(plan.param_gather_bytes[0] > 0);
    let g = crate::common::lowered_step(&w);
    assert!(!g.tasks.iter().any(|t| t.label.name == "param-all-gather"));
}

/// The closed form prices the overlapped gathers as the simulator runs them (within 1%), the
/// step shortened where it repeats is the step simulated whole, and the composition of a
/// pipeline's distinct programs stays near the whole simulation. Where a layer's forward is
/// longer than its gather (long sequences), overlapping saves all but the first gather; where
/// it is much shorter (short sequences, the gathers crossing nodes) the gathers pace the first
/// forward, and in a pipeline every stage's fill, so overlapping costs more than gathering after
/// the step — as Megatron's one-bucket-ahead issue would.
#[test]
fn overlapped_gathers_hide_behind_long_forwards_and_pace_short_ones() {
    for pp in [1, 2] {
        let (m, dp) = (4 * pp, 4);
        let long = |g| workload(pp, dp, m, 32768, g);
        let short = |g| workload(pp, dp, m, 1024, g);
        for w in [
            long(ParamGather::Overlapped),
            short(ParamGather::Overlapped),
        ] {
            paths_agree(&w, &format!("pp {pp}, s {}", w.seq));
        }
        let (after, _) = step_s(&long(ParamGather::AfterStep), SimDepth::Full);
        let (over, _) = step_s(&long(ParamGather::Overlapped), SimDepth::Full);
        assert!(
            over < after,
            "pp {pp}: long forwards hide the gathers: {over} vs {after}"
        );
        let (after, _) = step_s(&short(ParamGather::AfterStep), SimDepth::Full);
        let (over, _) = step_s(&short(ParamGather::Overlapped), SimDepth::Full);
        if pp > 1 {
            assert!(
                over > after,
                "pp {pp}: the gathers pace the fill: {over} vs {after}"
            );
        }
    }
}

/// Without a sharded optimizer state below ZeRO-3 there is no such gather: refused in one line
/// naming the option (`simulate`), dropped for such candidates (`plan`), harmless without
/// replicas (nothing to gather).
#[test]
fn overlapped_gathers_need_zero_1_or_2() {
    for zero in [ZeroStage::Zero0, ZeroStage::Zero3] {
        let mut w = workload(1, 2, 2, 2048, ParamGather::Overlapped);
        w.options.zero = Some(zero);
        let e = w.validate().unwrap_err().to_string();
        assert!(
            e.contains("--param-gather overlapped") && e.contains("--zero 1 or 2"),
            "{e}"
        );
    }
    let w = workload(1, 1, 2, 2048, ParamGather::Overlapped)
        .validate()
        .unwrap();
    let plan = metp_sim::schedule::plan(&w);
    assert_eq!(
        (plan.first_forward_gather_bytes, plan.param_gather_bytes[0]),
        (0, 0)
    );
}

/// An interleaved stage's gathers run in one chain over its chunks, as Megatron's distributed
/// optimizer orders its buckets: the second chunk's first layer is gathered as the first
/// chunk's last layer starts its first forward — during the first chunk's other micro-batches,
/// not when the second chunk's first forward begins — and that forward waits for it. The
/// closed form, the shortened step and the composition price the chain as the whole
/// simulation runs it; with long forwards it hides every gather but the stage's first.
#[test]
fn overlapped_gathers_chain_over_an_interleaved_stage_s_chunks() {
    let interleaved = |seq, gather| {
        let mut w = workload(2, 2, 4, seq, gather);
        w.outer.interleave = 2;
        w
    };
    let w = interleaved(2048, ParamGather::Overlapped)
        .validate()
        .unwrap();
    // Stage 0 holds layers 0-1 (chunk 0) and 4-5 (chunk 1).
    let g = crate::common::lowered_step(&w);
    let gathers = param_gathers(&g);
    assert_eq!(
        gathers.iter().map(|g| g.1).collect::<Vec<_>>(),
        vec![0, 1, 4, 5],
        "one chain, chunk by chunk"
    );
    let computes = |layer: u32, mb: u32| forward_computes(&g, layer, mb);
    let (chained, _) = gathers[2];
    assert!(
        chained < computes(1, 0)[0],
        "chunk 1's first gather is issued as chunk 0's last layer starts its first forward"
    );
    assert!(
        chained < computes(0, 1)[0],
        "and before chunk 0's second micro-batch"
    );
    assert!(g.tasks[chained].deps.contains(&(gathers[1].0 as u32)));
    assert!(
        g.tasks[computes(4, 0)[0]].deps.contains(&(chained as u32)),
        "chunk 1's first forward waits for its gather"
    );
    for seq in [32768, 1024] {
        let w = interleaved(seq, ParamGather::Overlapped);
        paths_agree(&w, &format!("interleaved, s {seq}"));
    }
    let (after, _) = step_s(&interleaved(32768, ParamGather::AfterStep), SimDepth::Full);
    let (over, _) = step_s(&interleaved(32768, ParamGather::Overlapped), SimDepth::Full);
    assert!(over < after, "{over} vs {after}");
}
