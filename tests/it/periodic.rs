//! The shortened simulation ([`SimDepth::Periodic`], the default of `simulate`, `sweep` and
//! `validate`) against the simulation of every layer and micro-batch ([`SimDepth::Full`]):
//! where the simulator proves the rest of the step repeats a shortened copy of it, every
//! number — step time, each device's compute, communication, exposed time and memory
//! high-water mark, the tasks and events — must be the same, to the picosecond and the byte.
//! Cases: no pipeline (layers left out) for every kind of method, with data parallelism over
//! two nodes, ZeRO, gradient accumulation, causal rings and context parallelism; pipelines
//! (micro-batches left out) with 1F1B and interleaving, context and data parallelism.

use metp_sim::config::{
    load_hardware, load_model, MethodId, Options, OuterAxes, Workload, ZeroStage,
};
use metp_sim::evaluate::{Evaluation, SimDepth, SimulateOptions};
use metp_sim::sim::{LinkModel, Shortened};

#[allow(clippy::too_many_arguments)]
fn workload(
    method: MethodId,
    p: u64,
    outer: OuterAxes,
    dp: u64,
    micro_batches: u64,
    layers: u64,
    seq: u64,
    causal: bool,
    zero: Option<ZeroStage>,
) -> Workload {
    let mut model = load_model("llama2-7b").unwrap();
    model.layers = layers;
    let mut hardware = load_hardware("dgx-a100-80gb").unwrap();
    hardware.nodes = (p * outer.cp * outer.pp * dp).div_ceil(hardware.gpus_per_node);
    Workload {
        model,
        hardware,
        method,
        p,
        dp,
        outer,
        seq,
        micro_batch: 1,
        micro_batches,
        options: Options {
            causal,
            zero,
            ..Options::default()
        },
    }
}

/// Simulates `w` short and whole; both must agree exactly, and the short one must really have
/// been shortened the way `want` says.
fn same_as_whole(w: Workload, link: LinkModel, want: fn(&Shortened) -> bool, label: &str) {
    let w = w.validate().unwrap();
    let run = |depth| {
        let mut o = SimulateOptions::full(link);
        o.depth = depth;
        Evaluation::new(w.clone()).simulate(o).unwrap()
    };
    let (short, whole) = (run(SimDepth::Periodic), run(SimDepth::Full));
    let (s, f) = (
        short.simulation.as_ref().unwrap(),
        whole.simulation.as_ref().unwrap(),
    );
    assert_eq!(s.depth, SimDepth::Periodic, "{label}: not shortened");
    let (sr, fr) = (s.run.as_ref().unwrap(), f.run.as_ref().unwrap());
    let what = sr.shortened.expect("says what it left out");
    assert!(want(&what), "{label}: shortened {what:?}");
    assert_eq!(sr.result.makespan_ps, fr.result.makespan_ps, "{label}");
    assert_eq!(sr.result.devices, fr.result.devices, "{label}");
    assert_eq!(
        (sr.result.tasks, sr.result.events),
        (fr.result.tasks, fr.result.events),
        "{label}"
    );
    assert_eq!(short.metrics, whole.metrics, "{label}");
    assert_eq!(sr.stages(), fr.stages(), "{label}");
}

fn layers(s: &Shortened) -> bool {
    // SHORT_LAYERS rounds, ZeRO-3's last layer (which gathers nothing ahead), and one more for
    // an even number left out.
    matches!(s, Shortened::Layers { simulated, layers } if *simulated <= metp_sim::sim::SHORT_LAYERS + 2 && simulated < layers)
}

fn micro_batches(s: &Shortened) -> bool {
    matches!(s, Shortened::MicroBatches { simulated, micro_batches } if simulated < micro_batches)
}

const NO_PIPELINE: OuterAxes = OuterAxes {
    pp: 1,
    interleave: 1,
    cp: 1,
};

#[test]
fn layers_left_out_without_a_pipeline_change_nothing() {
    use MethodId::*;
    for (method, p, dp, m, causal, zero, link) in [
        (Metp, 4, 1, 1, false, None, LinkModel::MaxMin),
        (
            Metp,
            8,
            2,
            2,
            true,
            Some(ZeroStage::Zero1),
            LinkModel::MaxMin,
        ),
        (Tp, 2, 2, 1, false, Some(ZeroStage::Zero2), LinkModel::Ideal),
        (TpSp, 8, 2, 3, false, None, LinkModel::MaxMin),
        (
            Ulysses,
            4,
            4,
            2,
            true,
            Some(ZeroStage::Zero3),
            LinkModel::MaxMin,
        ),
        // Not causal: under a causal mask ring attention's ranks do differently shaped work, and
        // with ZeRO-3's gathers flowing beside the compute (rather than a blocking gather lining
        // the ranks up at every layer) their backward drifts without settling into a period
        // the shortened copy can prove; it is then simulated whole.
        (Ring, 4, 1, 1, false, None, LinkModel::MaxMin),
        (Rsa, 2, 1, 1, false, None, LinkModel::Ideal),
    ] {
        let w = workload(method, p, NO_PIPELINE, dp, m, 10, 8192, causal, zero);
        let label = format!("{method} p={p} dp={dp} m={m} causal={causal} zero={zero:?}");
        same_as_whole(w, link, layers, &label);
    }
    // Context parallelism over two nodes, causal (its ranks are not folded).
    let cp = OuterAxes {
        cp: 4,
        ..NO_PIPELINE
    };
    let w = workload(TpSp, 4, cp, 1, 1, 9, 16384, true, None);
    same_as_whole(w, LinkModel::MaxMin, layers, "tp-sp cp=4 causal");
}

#[test]
fn steady_pipeline_rounds_left_out_change_nothing() {
    use MethodId::*;
    let outer = |pp, interleave, cp| OuterAxes { pp, interleave, cp };
    for (method, p, o, dp, m, layers_, causal, zero) in [
        // 1F1B: 11 of 16 micro-batches simulated (the warm-up, 8 steady rounds, the cool-down).
        (
            Tp,
            2,
            outer(4, 1, 1),
            2,
            16,
            4,
            false,
            Some(ZeroStage::Zero1),
        ),
        (TpSp, 2, outer(4, 1, 2), 1, 14, 8, true, None),
        (
            Metp,
            2,
            outer(2, 1, 1),
            2,
            12,
            4,
            false,
            Some(ZeroStage::Zero3),
        ),
        // Interleaved: rounds of pp · v pairs.
        (TpSp, 2, outer(2, 2, 1), 1, 22, 4, false, None),
    ] {
        let w = workload(method, p, o, dp, m, layers_, 4096, causal, zero);
        let label = format!("{method} p={p} {o:?} dp={dp} m={m}");
        same_as_whole(w, LinkModel::MaxMin, micro_batches, &label);
    }
}

/// A hand-made graph of `rounds` rounds on two devices that trade messages: in each, a device
/// runs a kernel once the other's message of the previous round has arrived, then sends its
/// own — declared as repeating rounds. `odd_kernel_at`: that round runs a smaller kernel.
fn two_device_rounds(rounds: u32, odd_kernel_at: Option<u32>) -> metp_sim::schedule::TaskGraph {
    use metp_sim::schedule::{
        KernelShape, Label, Pass, Periodic, Segment, Stream, TaskGraph, TaskId, Work,
    };
    let label = Label {
        pass: Pass::Fwd,
        layer: None,
        block: "b",
        name: "n",
        outer: None,
        step: None,
        micro_batch: 0,
    };
    let mut g = TaskGraph::new(2);
    let k = g.add_kernel(KernelShape::gemm(4096, 4096, 4096));
    let odd = g.add_kernel(KernelShape::gemm(4096, 4096, 2048));
    // A lead-in that is not part of the rounds.
    let mut prev: Vec<Vec<TaskId>> = (0..2)
        .map(|d| {
            vec![g.add(
                d,
                Stream::Compute,
                Work::Compute { kernel: odd },
                vec![],
                label,
            )]
        })
        .collect();
    let base = g.tasks.len() as u32;
    for r in 0..rounds {
        let kernel = if odd_kernel_at == Some(r) { odd } else { k };
        let mut next = Vec::new();
        for d in 0..2u32 {
            let c = g.add(
                d,
                Stream::Compute,
                Work::Compute { kernel },
                prev[d as usize].clone(),
                label,
            );
            let tag = u64::from(r) * 2 + u64::from(d);
            g.add(
                d,
                Stream::Comm(0),
                Work::Send {
                    to: 1 - d,
                    bytes: 1 << 28,
                    tag,
                },
                vec![c],
                label,
            );
            let other = u64::from(r) * 2 + u64::from(1 - d);
            let rv = g.add(
                d,
                Stream::Comm(1),
                Work::Recv {
                    from: 1 - d,
                    bytes: 1 << 28,
                    tag: other,
                },
                vec![],
                label,
            );
            next.push(vec![rv]);
        }
        prev = next;
    }
    g.periodic = vec![Periodic {
        segments: vec![Segment {
            base,
            stride: 6,
            rounds,
        }],
        insert: 0,
    }];
    g
}

/// The monitor's claim on a graph small enough to check by hand: 8 rounds with 40 more
/// declared are 48 rounds, exactly; a declaration whose rounds differ (one kernel of another
/// shape) is never proven, so nothing is inserted.
#[test]
fn proven_rounds_extend_exactly_and_differing_rounds_are_not_proven() {
    use metp_sim::sim::{simulate, SimOptions};
    let hw = load_hardware("dgx-a100-80gb").unwrap();
    let opts = SimOptions {
        periodic: true,
        ..SimOptions::default()
    };
    let long = simulate(&two_device_rounds(48, None), &hw, LinkModel::MaxMin, opts).unwrap();
    let mut g = two_device_rounds(8, None);
    g.periodic[0].insert = 40;
    let short = simulate(&g, &hw, LinkModel::MaxMin, opts).unwrap();
    assert!(short.periodic[0].is_some());
    assert_eq!(short.makespan_ps, long.makespan_ps);
    assert_eq!(short.devices, long.devices);
    assert_eq!((short.tasks, short.events), (long.tasks, long.events));
    // Round 5 runs another kernel: rounds 5 and 6 differ from their predecessors, and the
    // rounds after them leave too few pairs to compare.
    let mut g = two_device_rounds(8, Some(5));
    g.periodic[0].insert = 40;
    let r = simulate(&g, &hw, LinkModel::MaxMin, opts).unwrap();
    let plain = simulate(
        &two_device_rounds(8, Some(5)),
        &hw,
        LinkModel::MaxMin,
        SimOptions::default(),
    )
    .unwrap();
    assert!(r.periodic[0].is_none());
    assert_eq!(r.makespan_ps, plain.makespan_ps, "nothing inserted");
}
