//! Outer axes (pipeline, context parallelism, data parallelism) end to end: the analytic twin
//! against the simulator on pipelined steps with ideal links, the symmetric-rank reduction
//! against the full simulation, and the per-stage memory of 1F1B and interleaved 1F1B.

use super::common::agrees_with_the_analytic_twin;
use metp_sim::config::{load_hardware, load_model, MethodId, Options, OuterAxes, Workload};
use metp_sim::evaluate::{Devices, Evaluation, SimulateOptions};
use metp_sim::memory::stage_inventories;
use metp_sim::sim::{simulate_plan, LinkModel, TraceScope};

/// A small workload: `layers` layers of LLaMA-2 7B on enough DGX-A100 nodes.
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
) -> Workload {
    let mut model = load_model("llama2-7b").unwrap();
    model.layers = layers;
    let mut hardware = load_hardware("dgx-a100-80gb").unwrap();
    let gpus = p * outer.cp * outer.pp * dp;
    hardware.nodes = gpus.div_ceil(hardware.gpus_per_node);
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
            ..Options::default()
        },
    }
}

fn pp(pp: u64, interleave: u64) -> OuterAxes {
    OuterAxes {
        pp,
        interleave,
        cp: 1,
    }
}

/// With ideal links the simulator's pipelined step and the analytic twin's walk of the same
/// 1F1B orders agree within 1% (they share the plan's prices, not their composition: the
/// simulator runs events on streams and links, the twin a closed recurrence per stage), and
/// the simulated memory high-water mark is the critical stage's inventory peak byte for byte.
#[test]
fn pipelines_agree_with_the_analytic_twin_within_one_percent() {
    let mut checked = 0;
    for method in [
        MethodId::TpSp,
        MethodId::Metp,
        MethodId::Ulysses,
        MethodId::Tp,
    ] {
        for (stages, v, m) in [(2, 1, 4), (4, 1, 8), (2, 2, 4), (4, 2, 8), (3, 1, 2)] {
            let w = workload(method, 4, pp(stages, v), 1, m, 8 * v.max(1), 8192, false);
            let label = format!("{method} p 4, pp {stages}, v {v}, m {m}");
            agrees_with_the_analytic_twin(&w, &label);
            checked += 1;
        }
    }
    assert_eq!(checked, 20);
}

/// The bubble is there: on an ideal machine, 1F1B over pp stages with m micro-batches takes
/// about (m + pp − 1) micro-batch times where one stage alone would take m (Narayanan et al.
/// 2021 §2.2: bubble fraction (pp − 1)/m); interleaving with v chunks divides the bubble by v.
#[test]
fn the_bubble_follows_narayanans_fraction() {
    let step = |outer: OuterAxes, layers: u64| {
        let w = workload(MethodId::TpSp, 2, outer, 1, 8, layers, 4096, false);
        let e = Evaluation::new(w.validate().unwrap())
            .simulate(SimulateOptions::full(LinkModel::Ideal))
            .unwrap();
        let stages = e
            .simulation
            .as_ref()
            .unwrap()
            .run
            .as_ref()
            .unwrap()
            .stages();
        (e, stages)
    };
    let (plain, stages) = step(pp(4, 1), 64);
    assert_eq!(stages.len(), 4);
    // Stage 1 (no embedding, no head): its idle time over its busy time (compute and exposed
    // communication) is (pp − 1)/m = 3/8, up to the head's extra work on the last stage (16
    // layers a stage keep it to a few per cent) and the pipeline messages.
    let s1 = stages[1];
    let fraction = s1.bubble_s / (s1.compute_s + s1.exposed_communication_s);
    assert!(
        (fraction - 3.0 / 8.0).abs() < 0.03,
        "bubble fraction {fraction:.3} vs (pp − 1)/m = 0.375"
    );
    let (inter, inter_stages) = step(pp(4, 2), 64);
    let s1i = inter_stages[1];
    let fraction_i = s1i.bubble_s / (s1i.compute_s + s1i.exposed_communication_s);
    assert!(
        (fraction_i - 3.0 / 16.0).abs() < 0.03,
        "interleaved bubble fraction {fraction_i:.3} vs (pp − 1)/(v·m) = 0.1875"
    );
    assert!(inter.metrics.step_time_s < plain.metrics.step_time_s);
}

/// Memory per stage: with 1F1B stage s holds the activations of min(pp − s, m) micro-batches
/// at its peak (Narayanan et al. 2021 §2.2; Korthikanti et al. 2022 §4.2: the first stage
/// holds pp of them, L/pp layers each, so L layers' worth). Interleaved, the first stage holds
/// Korthikanti's factor (1 + (pp − 1)/(pp·v)) times that.
#[test]
fn stages_hold_the_micro_batches_1f1b_keeps_in_flight() {
    let w = workload(MethodId::TpSp, 2, pp(4, 1), 1, 8, 16, 4096, false)
        .validate()
        .unwrap();
    let inv = stage_inventories(&w);
    assert_eq!(inv.len(), 4);
    for (s, i) in inv.iter().enumerate() {
        assert_eq!(i.layers, 4, "stage {s}");
        // The first stage holds 4 micro-batches of 4 layers = 16 layer-activations, the last 1.
        assert_eq!(i.in_flight_layers, 4 * (4 - s as u64), "stage {s}");
    }
    // Weights: the embedding lives on stage 0, the head on stage 3 (LLaMA's untied head), so
    // the middle stages hold less static memory than the edges.
    assert!(inv[1].static_bytes < inv[0].static_bytes);
    assert!(inv[1].static_bytes < inv[3].static_bytes);
    assert_eq!(inv[1].static_bytes, inv[2].static_bytes);

    // Interleaved, pp = 4, v = 2, m = 8: the first stage's warm-up is (4 − 1)·2 + (2 − 1)·4 =
    // 10 virtual micro-batches of 2 layers, and one more forward before the first backward:
    // 11 · 2 = 22 layer-activations = 16 · (1 + 3/8), Korthikanti's factor on L = 16.
    let wi = workload(MethodId::TpSp, 2, pp(4, 2), 1, 8, 16, 4096, false)
        .validate()
        .unwrap();
    let first = &stage_inventories(&wi)[0];
    assert_eq!(first.layers, 4);
    assert_eq!(first.in_flight_layers, 22);
    assert_eq!(16.0 * (1.0 + 3.0 / 8.0), 22.0);
}

/// Every stage of the interleaved schedule holds what Megatron-LM's
/// `forward_backward_pipelining_with_interleaving` keeps in flight: its warm-up of
/// (pp − s − 1)·2 + (v − 1)·pp virtual micro-batches (all m·v of them when m = pp), and one
/// more forward before its first backward — each chunk of L/(pp·v) layers. Also Llama 3's
/// layout (Grattafiori et al. 2024 §3.3.2): 126 layers over 16 ranks × 8 chunks, the first
/// chunk of rank 0 only the embedding and the last chunk of rank 15 only the head; with 32
/// micro-batches rank 1 holds 141 layers (140 warm-up chunks of one layer, and one more) and
/// rank 0, whose 16 embedding-only chunks hold none, 112, as rank 15.
#[test]
fn interleaved_stages_hold_megatrons_warm_up_count() {
    for (stages, v, m) in [(4, 2, 8), (4, 2, 4), (4, 3, 12), (2, 4, 6), (8, 2, 16)] {
        let c = 2; // layers per chunk
        let w = workload(
            MethodId::TpSp,
            2,
            pp(stages, v),
            1,
            m,
            stages * v * c,
            4096,
            false,
        )
        .validate()
        .unwrap();
        for (s, inv) in stage_inventories(&w).iter().enumerate() {
            let s = s as u64;
            let chunks = if m == stages {
                m * v
            } else {
                ((stages - s - 1) * 2 + (v - 1) * stages + 1).min(m * v)
            };
            assert_eq!(
                inv.in_flight_layers,
                chunks * c,
                "pp {stages}, v {v}, m {m}, stage {s}"
            );
        }
    }
    let mut model = load_model("llama3-405b").unwrap();
    model.hidden = 1024;
    model.ffn_hidden = 3328;
    let mut hardware = load_hardware("dgx-h100").unwrap();
    hardware.nodes = 16;
    let w = Workload {
        model,
        hardware,
        method: MethodId::TpSp,
        p: 8,
        dp: 1,
        outer: pp(16, 8),
        seq: 8192,
        micro_batch: 1,
        micro_batches: 32,
        options: Options {
            causal: true,
            ..Options::default()
        },
    }
    .validate()
    .unwrap();
    let inv = stage_inventories(&w);
    assert_eq!((inv[0].layers, inv[1].layers, inv[15].layers), (7, 8, 7));
    assert_eq!(inv[0].in_flight_layers, 112);
    assert_eq!(inv[1].in_flight_layers, 141);
    // Rank 15: 7·16 + 1 warm-up chunks, the last of them its head-only chunk 7.
    assert_eq!(inv[15].in_flight_layers, 112);
    // Two more virtual stages than that are refused.
    let mut bad = w.into_workload();
    bad.outer = pp(16, 8);
    bad.model.layers = 125;
    assert!(bad
        .validate()
        .unwrap_err()
        .to_string()
        .contains("plus the embedding"));
}

/// The reduced simulation (one device per distinct program) equals the simulation of every
/// device: step time, critical-device compute, communication and exposed communication within
/// 10⁻⁶ relative, and the memory high-water mark exactly. Each case also checks that the
/// reduction really folded devices away, so the comparison is never of a graph with itself.
#[test]
fn the_symmetric_reduction_equals_the_full_simulation() {
    let cases: Vec<(&str, Workload)> = vec![
        (
            "tp p 2, dp 8 (replicas over whole nodes)",
            workload(MethodId::Tp, 2, OuterAxes::default(), 8, 1, 2, 4096, false),
        ),
        (
            "tp-sp p 4, dp 1 (method ranks)",
            workload(
                MethodId::TpSp,
                4,
                OuterAxes::default(),
                1,
                1,
                2,
                8192,
                false,
            ),
        ),
        (
            "tp-sp p 2, cp 4 (context ranks)",
            workload(
                MethodId::TpSp,
                2,
                OuterAxes {
                    pp: 1,
                    interleave: 1,
                    cp: 4,
                },
                1,
                1,
                2,
                8192,
                false,
            ),
        ),
        (
            "ulysses p 4, pp 2, dp 4, ZeRO auto",
            workload(MethodId::Ulysses, 4, pp(2, 1), 4, 4, 4, 8192, false),
        ),
        (
            "metp p 8, dp 2 (replicas over nodes)",
            workload(
                MethodId::Metp,
                8,
                OuterAxes::default(),
                2,
                1,
                2,
                16384,
                false,
            ),
        ),
        (
            "tp-sp p 8, pp 2 interleaved, dp 2",
            workload(MethodId::TpSp, 8, pp(2, 2), 2, 4, 4, 4096, false),
        ),
        (
            "ring p 4, dp 4, non-causal",
            workload(
                MethodId::Ring,
                4,
                OuterAxes::default(),
                4,
                1,
                2,
                8192,
                false,
            ),
        ),
    ];
    // The same on an NVSwitch node with NVLS (dgx-h100): NVLS all-reduces and rings across
    // nodes spread over the rails fold exactly too.
    let h100: Vec<(String, Workload)> = cases
        .iter()
        .map(|(label, w)| {
            let mut w = w.clone();
            let nodes = w.hardware.nodes;
            w.hardware = load_hardware("dgx-h100").unwrap();
            w.hardware.nodes = nodes;
            (format!("{label} on dgx-h100"), w)
        })
        .collect();
    let cases: Vec<(String, Workload)> = cases
        .into_iter()
        .map(|(l, w)| (l.to_string(), w))
        .chain(h100)
        .collect();
    for (label, w) in cases {
        let w = w.validate().unwrap();
        let stages = stage_inventories(&w);
        let plan = metp_sim::schedule::plan(&w);
        for link in [LinkModel::Ideal, LinkModel::MaxMin] {
            let run = |d| simulate_plan(&w, &plan, &stages, link, TraceScope::Off, d).unwrap();
            let (full, reduced) = (run(Devices::All), run(Devices::Distinct));
            assert!(
                reduced.devices < full.devices,
                "{label}: nothing folded ({} of {})",
                reduced.devices,
                full.devices
            );
            assert_eq!(reduced.cluster_devices, full.devices, "{label}");
            let (a, b) = (full.times(), reduced.times());
            for (what, x, y) in [
                ("step", a.step_time_s, b.step_time_s),
                ("compute", a.compute_s, b.compute_s),
                ("communication", a.communication_s, b.communication_s),
                (
                    "exposed",
                    a.exposed_communication_s,
                    b.exposed_communication_s,
                ),
            ] {
                let rel = (x - y).abs() / x.abs().max(1e-12);
                assert!(
                    rel <= 1e-6,
                    "{label} ({link:?}): {what} full {x:.9} s vs reduced {y:.9} s"
                );
            }
            assert_eq!(
                full.result.max_memory_high_water_bytes(),
                reduced.result.max_memory_high_water_bytes(),
                "{label}"
            );
        }
    }
}

/// Where the reduction would not be exact it is not made: METP's owner-rooted exchange and a
/// causal ring keep every rank (only replicas are folded), and pipeline stages always stay.
#[test]
fn asymmetric_programs_are_not_folded() {
    let metp = workload(MethodId::Metp, 4, pp(2, 1), 1, 2, 4, 8192, false)
        .validate()
        .unwrap();
    let ring = workload(MethodId::Ring, 4, OuterAxes::default(), 1, 1, 2, 8192, true)
        .validate()
        .unwrap();
    for w in [metp, ring] {
        let stages = stage_inventories(&w);
        let plan = metp_sim::schedule::plan(&w);
        let r = simulate_plan(
            &w,
            &plan,
            &stages,
            LinkModel::Ideal,
            TraceScope::Off,
            Devices::Distinct,
        )
        .unwrap();
        assert_eq!(r.devices, r.cluster_devices, "{}", w.method);
    }
}

/// On a fabric where mirroring would not be exact — an intra-node xGMI mesh (a link per pair of
/// GPUs) or a leaf-spine layer — nothing is folded, even replicas over whole nodes.
#[test]
fn fabrics_without_per_device_links_are_not_folded() {
    for hw in ["mi300x-8", "a100-cluster-2to1"] {
        let mut w = workload(
            MethodId::TpSp,
            4,
            OuterAxes::default(),
            4,
            1,
            2,
            8192,
            false,
        );
        w.hardware = load_hardware(hw).unwrap();
        w.hardware.nodes = w.hardware.nodes.max(2);
        let w = w.validate().unwrap();
        let stages = stage_inventories(&w);
        let plan = metp_sim::schedule::plan(&w);
        let r = simulate_plan(
            &w,
            &plan,
            &stages,
            LinkModel::MaxMin,
            TraceScope::Off,
            Devices::Distinct,
        )
        .unwrap();
        assert_eq!(r.devices, r.cluster_devices, "{hw}");
    }
}

/// TP without sequence parallelism holds a layer's output whole on every rank, so each rank
/// sends only its 1/p piece to the next stage and the receiving ranks all-gather the pieces
/// before using them (Megatron-LM 2021–22's scatter-gather, `gather_split_1d_tensor` after the
/// receive; DeepSpeed's partitioned activations): every pipeline receive of `tp` is followed by
/// an all-gather of the whole tensor over the method group that the next compute waits for;
/// `tp-sp`, whose ranks hold their own share, has none. The gathers cost time, and the twin
/// prices them as the simulator does (the test above).
#[test]
fn tp_gathers_what_the_pipeline_scattered() {
    use metp_sim::schedule::{
        lower, plan, CollectiveOp, Devices as LowerDevices, LowerOptions, Rounds, Stream, Work,
    };
    let gathers = |method: MethodId| {
        let w = workload(method, 4, pp(2, 1), 1, 4, 8, 8192, false)
            .validate()
            .unwrap();
        let pl = plan(&w);
        let g = lower(
            &w,
            &pl,
            &stage_inventories(&w),
            LowerOptions {
                devices: LowerDevices::All,
                memory: false,
                optimizer: true,
                rounds: Rounds::None,
            },
        );
        g.check().unwrap();
        let (mut receives, mut gathered) = (0, 0);
        for (i, t) in g.tasks.iter().enumerate() {
            if let Work::Recv { bytes, .. } = t.work {
                receives += 1;
                assert_eq!(bytes, pl.pipeline_bytes);
                // The gather that follows it on the same device depends on it.
                let next = g.tasks[i + 1..].iter().find(|u| {
                    u.device == t.device && u.deps.contains(&(i as u32)) && u.stream != t.stream
                });
                if let Some(Work::Collective {
                    op: CollectiveOp::AllGather,
                    bytes,
                    ref group,
                    ..
                }) = next.map(|u| &u.work)
                {
                    assert_eq!(*bytes, 4 * pl.pipeline_bytes);
                    assert_eq!(group.len(), 4);
                    assert_ne!(next.unwrap().stream, Stream::Compute);
                    gathered += 1;
                }
            }
        }
        (receives, gathered)
    };
    let (receives, gathered) = gathers(MethodId::Tp);
    assert!(receives > 0);
    assert_eq!(gathered, receives);
    let (receives, gathered) = gathers(MethodId::TpSp);
    assert!(receives > 0);
    assert_eq!(gathered, 0);
    // The step: the same plan without the gathers is shorter by at least one gather per
    // micro-batch on the last stage's critical path (its forward receives).
    let w = workload(MethodId::Tp, 4, pp(2, 1), 1, 4, 8, 8192, false)
        .validate()
        .unwrap();
    let with = plan(&w);
    let mut without = with.clone();
    without.pipeline_gather_bytes = 0;
    let stages = stage_inventories(&w);
    let step = |pl| {
        simulate_plan(
            &w,
            pl,
            &stages,
            LinkModel::Ideal,
            TraceScope::Off,
            Devices::All,
        )
        .unwrap()
        .result
        .step_time_s
    };
    let gather_s = metp_sim::cost::CostModel::new(&w.hardware).collective_s(
        CollectiveOp::AllGather,
        &[0, 1, 2, 3],
        with.pipeline_gather_bytes,
    );
    assert!(gather_s > 0.0);
    let grown = step(&with) - step(&without);
    assert!(
        grown >= 4.0 * gather_s * 0.99,
        "{grown} s for gathers of {gather_s} s"
    );
}

/// Transformer Engine's `bulk` overlaps launch their GEMM whole beside the collective (the QKV
/// and fc1 data-gradient GEMMs beside the input's all-gather for the weight gradient, their
/// weight-gradient GEMMs beside the input gradient's reduce-scatter): each step of those four
/// rings carries one of p equal shares of the whole GEMM, which together cost exactly the whole
/// call and hold its FLOPs, while the `ring_exchange` pairs (fc2's data gradient here) compute
/// GEMMs on p times fewer tokens. A weight gradient cut into p token chunks instead — what these
/// pairs were priced as until stop 41 — has a k-loop p times shorter and costs more.
#[test]
fn bulk_overlaps_carry_shares_of_the_whole_gemm() {
    use metp_sim::cost::CostModel;
    use metp_sim::schedule::{plan, Gemm, KernelShape, Stage};
    let p = 8;
    let mut w = workload(MethodId::TpSp, p, OuterAxes::default(), 1, 1, 2, 8192, true);
    w.options.tp_comm_overlap = true;
    let hw = w.hardware.clone();
    let pl = plan(&w.validate().unwrap());
    let cost = CostModel::new(&hw);
    let rings: Vec<_> = pl
        .layer_bwd
        .iter()
        .flat_map(|b| &b.stages)
        .filter_map(|s| match s {
            Stage::Ring(r) => Some(r),
            _ => None,
        })
        .collect();
    let gemm_of = |name: &str| -> Vec<Gemm> {
        let r = rings.iter().find(|r| r.name == name).expect(name);
        assert_eq!(r.steps.len() as u64, p, "{name}");
        r.steps
            .iter()
            .map(|s| match s.kernels.as_slice() {
                [k] => match k.shape {
                    KernelShape::Gemm(g) => g,
                    _ => panic!("{name}: {k:?}"),
                },
                ks => panic!("{name}: {ks:?}"),
            })
            .collect()
    };
    let rows = 8192;
    for name in [
        "fc1-dgrad-all-gather-input",
        "fc1-wgrad-reduce-scatter",
        "qkv-dgrad-all-gather-input",
        "qkv-wgrad-reduce-scatter",
    ] {
        let shares = gemm_of(name);
        let whole = Gemm {
            parts: 1,
            ..shares[0]
        };
        assert!(
            shares.iter().all(|g| *g == shares[0] && g.parts == p),
            "{name}"
        );
        // The whole GEMM's tokens: rows for a data gradient, the inner dimension for a weight
        // gradient.
        assert!(whole.m == rows || whole.k == rows, "{name}: {whole:?}");
        let t = |g: &Gemm| cost.kernel_s(&KernelShape::Gemm(*g));
        let sum: f64 = shares.iter().map(t).sum();
        assert!(
            (sum / t(&whole) - 1.0).abs() < 1e-12,
            "{name}: {sum} against {}",
            t(&whole)
        );
        let flops: f64 = shares.iter().map(Gemm::flops).sum();
        assert!((flops / whole.flops() - 1.0).abs() < 1e-12, "{name}");
        if whole.k == rows {
            let chunk = Gemm {
                k: rows / p,
                ..whole
            };
            assert!(
                p as f64 * t(&chunk) > sum,
                "{name}: token chunks {} s against the whole call's {sum} s",
                p as f64 * t(&chunk)
            );
        }
    }
    // A ring_exchange pair: GEMMs on p times fewer tokens, each a call of its own.
    let fc2 = gemm_of("fc2-dgrad-all-gather");
    assert!(
        fc2.iter().all(|g| g.parts == 1 && g.m == rows / p),
        "{fc2:?}"
    );
}

/// `--tp-comm-overlap` (Transformer Engine's userbuffers, `schedule::tp_sp`): every all-gather
/// and reduce-scatter of a layer becomes a ring of p token chunks under the GEMM next to it, so
/// a layer's plan holds no exposed collective (the head's stay), its GEMM FLOPs are the same
/// as without overlap, the simulator and the analytic twin agree on it within 1% with
/// pipelines, context parallelism (both exchanges) and each recomputation policy, memory is
/// unchanged, the exposed communication falls and the step is shorter on a step where the
/// collectives cost a quarter of it. Other methods refuse it in one line.
#[test]
fn tp_comm_overlap_hides_the_collectives_under_the_gemms() {
    use metp_sim::config::{CpComm, Recompute};
    use metp_sim::schedule::{plan, Stage};
    let with = |overlap: bool, outer: OuterAxes, m: u64, recompute: Recompute, cp_comm: CpComm| {
        let mut w = workload(
            MethodId::TpSp,
            4,
            outer,
            1,
            m,
            4 * outer.interleave.max(1) * outer.pp,
            8192,
            true,
        );
        w.options.tp_comm_overlap = overlap;
        w.options.recompute = recompute;
        w.options.runtime.cp_comm = cp_comm;
        w
    };
    let flat = OuterAxes::default();
    let cp2 = OuterAxes {
        cp: 2,
        ..OuterAxes::default()
    };
    // The plan: rings instead of collectives in every layer block, the same FLOPs.
    for recompute in [Recompute::None, Recompute::Selective, Recompute::Full] {
        for (outer, cp_comm) in [
            (flat, CpComm::Ring),
            (cp2, CpComm::Ring),
            (cp2, CpComm::AllGather),
        ] {
            let label = format!("{recompute:?} cp {} {cp_comm:?}", outer.cp);
            let off = plan(
                &with(false, outer, 1, recompute, cp_comm)
                    .validate()
                    .unwrap(),
            );
            let on = plan(&with(true, outer, 1, recompute, cp_comm).validate().unwrap());
            let collectives = |pl: &metp_sim::schedule::StepPlan| {
                pl.layer_fwd
                    .iter()
                    .chain(&pl.layer_bwd)
                    .flat_map(|b| &b.stages)
                    .filter(|s| matches!(s, Stage::Collective { .. }))
                    .count()
            };
            assert!(collectives(&off) >= 6, "{label}");
            // With selective recomputation and context parallelism the recomputed QKV
            // projection needs the input gathered first: that one gather stays exposed.
            let kept = usize::from(recompute == Recompute::Selective && outer.cp > 1);
            assert_eq!(collectives(&on), kept, "{label}");
            assert!(
                (on.layer_flops() / off.layer_flops() - 1.0).abs() < 1e-9,
                "{label}: {} vs {}",
                on.layer_flops(),
                off.layer_flops()
            );
            assert_eq!(on.head, off.head, "{label}: the head's collectives stay");
        }
    }
    // Priced the same by both engines, memory byte for byte (the helper checks both).
    for (outer, recompute, cp_comm, label) in [
        (flat, Recompute::None, CpComm::Ring, "flat"),
        (flat, Recompute::Selective, CpComm::Ring, "selective"),
        (flat, Recompute::Full, CpComm::Ring, "full"),
        (pp(2, 2), Recompute::None, CpComm::Ring, "pp 2 v 2"),
        (cp2, Recompute::None, CpComm::Ring, "cp 2 ring"),
        (
            cp2,
            Recompute::Selective,
            CpComm::AllGather,
            "cp 2 all-gather, selective",
        ),
    ] {
        let m = if outer.pp > 1 { 4 } else { 2 };
        let off = agrees_with_the_analytic_twin(&with(false, outer, m, recompute, cp_comm), label);
        let on = agrees_with_the_analytic_twin(&with(true, outer, m, recompute, cp_comm), label);
        assert_eq!(on.inventory.peak_bytes, off.inventory.peak_bytes, "{label}");
        assert!(
            on.metrics.exposed_communication_s < 0.5 * off.metrics.exposed_communication_s,
            "{label}: exposed {} s with overlap, {} s without",
            on.metrics.exposed_communication_s,
            off.metrics.exposed_communication_s
        );
        if outer.cp == 1 && outer.pp == 1 {
            assert!(
                on.metrics.step_time_s < off.metrics.step_time_s,
                "{label}: {} s with overlap, {} s without",
                on.metrics.step_time_s,
                off.metrics.step_time_s
            );
        }
    }
    // Only sequence parallelism has these collectives.
    let mut w = workload(MethodId::Tp, 4, flat, 1, 1, 4, 8192, true);
    w.options.tp_comm_overlap = true;
    let e = w.validate().unwrap_err().to_string();
    assert!(
        e.contains("--tp-comm-overlap") && e.contains("tp-sp") && !e.contains('\n'),
        "{e}"
    );
}
