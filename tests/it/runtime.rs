//! The software's schedule options (`config::runtime`) end to end: LLaMA 3's flexible
//! interleaved rounds, blocking pipeline exchanges and the gradient synchronisation after the
//! backward — the simulator and the analytic twin agree on each, each moves the step (or the
//! memory) the way the software it models did, and what no such software can run is refused.

use super::common::agrees_with_the_analytic_twin;
use metp_sim::config::{
    load_hardware, load_model, CpComm, GradBuffer, GradSync, MethodId, Options, OuterAxes, PipeP2p,
    Runtime, Workload, ZeroStage,
};
use metp_sim::evaluate::{Evaluation, SimulateOptions};
use metp_sim::memory::{stage_inventories, GradLifetime};
use metp_sim::sim::LinkModel;

/// `layers` layers of LLaMA-2 7B, tp-sp p = 2, on enough DGX-A100 nodes, ZeRO 0.
fn workload(pp: u64, v: u64, dp: u64, m: u64, layers: u64, runtime: Runtime) -> Workload {
    let mut model = load_model("llama2-7b").unwrap();
    model.layers = layers;
    let mut hardware = load_hardware("dgx-a100-80gb").unwrap();
    let p = 2;
    hardware.nodes = (p * pp * dp).div_ceil(hardware.gpus_per_node);
    Workload {
        model,
        hardware,
        method: MethodId::TpSp,
        p,
        dp,
        outer: OuterAxes {
            pp,
            interleave: v,
            cp: 1,
        },
        seq: 4096,
        micro_batch: 1,
        micro_batches: m,
        options: Options {
            zero: Some(ZeroStage::Zero0),
            runtime,
            ..Options::default()
        },
    }
}

fn step(w: &Workload) -> f64 {
    Evaluation::new(w.clone().validate().unwrap())
        .simulate(SimulateOptions::full(LinkModel::Ideal))
        .unwrap()
        .metrics
        .step_time_s
}

fn blocking() -> Runtime {
    Runtime {
        pp_p2p: PipeP2p::Blocking,
        ..Runtime::default()
    }
}

fn lockstep() -> Runtime {
    Runtime {
        pp_p2p: PipeP2p::Lockstep,
        ..Runtime::default()
    }
}

fn after_backward() -> Runtime {
    Runtime {
        grad_sync: GradSync::AfterBackward,
        ..Runtime::default()
    }
}

fn round(n: u64) -> Runtime {
    Runtime {
        pp_round: Some(n),
        ..Runtime::default()
    }
}

/// Each option, with and without a pipeline and interleaving, priced by the simulator and by
/// the closed form within 1%, memory byte for byte.
#[test]
fn runtime_options_agree_with_the_analytic_twin() {
    let cases = [
        ("blocking, pp 4", workload(4, 1, 1, 8, 8, blocking())),
        ("blocking, pp 4 v 2", workload(4, 2, 1, 8, 16, blocking())),
        ("lockstep, pp 4", workload(4, 1, 1, 8, 8, lockstep())),
        (
            "lockstep, pp 4, uneven stages",
            workload(4, 1, 1, 8, 10, lockstep()),
        ),
        (
            "lockstep, pp 3 dp 2, after-backward",
            workload(
                3,
                1,
                2,
                6,
                6,
                Runtime {
                    grad_sync: GradSync::AfterBackward,
                    ..lockstep()
                },
            ),
        ),
        (
            "after-backward, dp 2",
            workload(1, 1, 2, 2, 4, after_backward()),
        ),
        (
            "after-backward, pp 2 dp 2",
            workload(2, 1, 2, 4, 8, after_backward()),
        ),
        (
            "after-backward, pp 2 v 2 dp 2",
            workload(2, 2, 2, 4, 8, after_backward()),
        ),
        ("round 4 = m = pp", workload(4, 2, 1, 4, 16, round(4))),
        ("round 8, m 16", workload(4, 2, 1, 16, 16, round(8))),
        ("round 2 = m < pp", workload(4, 2, 1, 2, 16, round(2))),
    ];
    for (label, w) in &cases {
        agrees_with_the_analytic_twin(w, label);
    }
}

/// Blocking exchanges and a synchronisation after the backward only add to a step; rounds of
/// more micro-batches hold more activations; with as many micro-batches as stages the flexible
/// order starts its backwards before Megatron's, which runs every forward first.
#[test]
fn runtime_options_move_the_step_the_way_the_software_did() {
    let base = workload(4, 2, 1, 8, 16, Runtime::default());
    assert!(step(&workload(4, 2, 1, 8, 16, blocking())) > step(&base));
    let dp = workload(2, 1, 2, 4, 8, Runtime::default());
    let later = workload(2, 1, 2, 4, 8, after_backward());
    assert!(step(&later) > step(&dp));

    let peak = |w: &Workload| {
        let inv = stage_inventories(&w.clone().validate().unwrap());
        inv.iter().map(|i| i.in_flight_layers).max().unwrap()
    };
    // pp 4, v 2, one layer per chunk, 16 micro-batches: rounds of 4 (Megatron's) hold
    // (v − 1)·4 + 2·3 + 1 = 11 chunks at the first stage, rounds of 8 hold 15, of 16 all 23.
    let mega = peak(&workload(4, 2, 1, 16, 8, Runtime::default()));
    assert_eq!(mega, 11);
    assert_eq!(peak(&workload(4, 2, 1, 16, 8, round(4))), 11);
    assert_eq!(peak(&workload(4, 2, 1, 16, 8, round(8))), 15);
    assert_eq!(peak(&workload(4, 2, 1, 16, 8, round(16))), 23);
    // m = pp: Megatron holds all 8 chunk forwards, the flexible order 2·3 + 4 + 1 = 11 capped
    // at 8 on the first stage but fewer further down.
    let megatron: Vec<u64> = stage_inventories(
        &workload(4, 2, 1, 4, 8, Runtime::default())
            .validate()
            .unwrap(),
    )
    .iter()
    .map(|i| i.in_flight_layers)
    .collect();
    let flexible: Vec<u64> =
        stage_inventories(&workload(4, 2, 1, 4, 8, round(4)).validate().unwrap())
            .iter()
            .map(|i| i.in_flight_layers)
            .collect();
    assert_eq!(megatron, [8, 8, 8, 8]);
    assert!(flexible[3] < 8, "{flexible:?}");
}

/// What the software cannot run is refused with a line naming the option.
#[test]
fn impossible_runtimes_are_refused() {
    let err = |w: Workload| w.validate().unwrap_err().to_string();
    // Several rounds shorter than the pipeline deadlock.
    assert!(err(workload(4, 2, 1, 8, 16, round(2))).contains("--pp-round 2"));
    // m not a multiple of the round.
    assert!(err(workload(4, 2, 1, 12, 16, round(8))).contains("multiple"));
    // No interleaving: no rounds.
    assert!(err(workload(4, 1, 1, 8, 8, round(4))).contains("--pp-interleave"));
    // ZeRO 2 reduce-scatters every micro-batch: not after the backward.
    let mut w = workload(2, 1, 2, 4, 8, after_backward());
    w.options.zero = Some(ZeroStage::Zero2);
    assert!(err(w).contains("after-backward"));
    // Without rounds, interleaving keeps Megatron's rule (m a multiple of pp).
    assert!(err(workload(4, 2, 1, 6, 16, Runtime::default())).contains("multiple of pp"));
    // Rounds set the rule instead: 12 micro-batches in rounds of 6 ≥ pp run.
    assert!(workload(4, 2, 1, 12, 16, round(6)).validate().is_ok());
}

/// Without a pipeline, a synchronisation after the backward runs once per layer after the
/// layer rounds: the step is not shortened by layers (a copy would leave syncs out), so the
/// default depth equals the whole simulation.
#[test]
fn after_backward_without_a_pipeline_is_simulated_whole() {
    use metp_sim::evaluate::{Evaluation, SimDepth, SimulateOptions};
    let after = Runtime {
        grad_sync: GradSync::AfterBackward,
        ..Runtime::default()
    };
    let w = workload(1, 1, 4, 2, 16, after).validate().unwrap();
    let run = |depth| {
        let mut o = SimulateOptions::full(LinkModel::MaxMin);
        o.depth = depth;
        Evaluation::new(w.clone()).simulate(o).unwrap()
    };
    let (short, whole) = (run(SimDepth::Periodic), run(SimDepth::Full));
    assert_eq!(
        short
            .simulation
            .as_ref()
            .unwrap()
            .run
            .as_ref()
            .unwrap()
            .shortened,
        None
    );
    assert_eq!(short.metrics, whole.metrics);
    assert!(metp_sim::sim::shortening(&w).is_none());
}

/// A flexible schedule repeats in rounds of its own size: a step in rounds
/// of 6 (pp 4; 72 micro-batches: the proof needs 8 rounds in the copy) is shortened by whole rounds where the simulator proves them periodic, and
/// equals the whole simulation to the picosecond; so does a step with blocking exchanges and a
/// synchronisation after the backward. The fast path simulates both exactly (no composition:
/// it walks Megatron's order with overlapped exchanges).
#[test]
fn runtime_steps_shorten_exactly() {
    use metp_sim::evaluate::{fast_path, Evaluation, FastPath, SimDepth, SimulateOptions};
    use metp_sim::sim::Shortened;
    let both = Runtime {
        pp_p2p: PipeP2p::Blocking,
        grad_sync: GradSync::AfterBackward,
        pp_round: None,
        cp_comm: CpComm::Ring,
        ..Runtime::default()
    };
    for (label, w) in [
        ("round 6", workload(4, 2, 1, 72, 16, round(6))),
        ("blocking, after-backward", workload(2, 2, 2, 32, 8, both)),
    ] {
        let w = w.validate().unwrap();
        let run = |depth| {
            let mut o = SimulateOptions::full(LinkModel::MaxMin);
            o.depth = depth;
            Evaluation::new(w.clone()).simulate(o).unwrap()
        };
        let (short, whole) = (run(SimDepth::Periodic), run(SimDepth::Full));
        let (s, f) = (
            short.simulation.as_ref().unwrap().run.as_ref().unwrap(),
            whole.simulation.as_ref().unwrap().run.as_ref().unwrap(),
        );
        assert!(
            matches!(s.shortened, Some(Shortened::MicroBatches { simulated, micro_batches }) if simulated < micro_batches),
            "{label}: not shortened ({:?})",
            s.shortened
        );
        assert_eq!(s.result.makespan_ps, f.result.makespan_ps, "{label}");
        assert_eq!(short.metrics, whole.metrics, "{label}");
        let plan = metp_sim::schedule::plan(&w);
        assert_eq!(
            fast_path(&w, &plan, metp_sim::evaluate::Devices::Distinct),
            FastPath::Exact,
            "{label}"
        );
    }
}

/// `layers` layers of LLaMA-2 7B, tp-sp p = 2 with context parallelism cp over a 16K causal
/// sequence, its K/V exchanged as `cp_comm` says.
fn context(cp: u64, cp_comm: CpComm) -> Workload {
    let mut w = workload(
        1,
        1,
        1,
        1,
        2,
        Runtime {
            cp_comm,
            ..Runtime::default()
        },
    );
    w.outer.cp = cp;
    w.seq = 16384;
    w.options.causal = true;
    w.hardware.nodes = (w.p * cp).div_ceil(w.hardware.gpus_per_node);
    w
}

/// LLaMA 3's context parallelism (§3.3.2: K and V all-gathered before the attention, exposed)
/// against Megatron's ring: the simulator and the closed form agree on it; it is slower than
/// the ring, whose hops hide behind the blocks' attention, by no more than the hops themselves;
/// it holds every K/V block at once; without context parallelism it is refused.
#[test]
fn all_gathered_context_parallelism_exposes_its_exchanges() {
    for cp in [2, 4] {
        agrees_with_the_analytic_twin(
            &context(cp, CpComm::AllGather),
            &format!("all-gather cp {cp}"),
        );
    }
    let ring = context(4, CpComm::Ring);
    let gathered = context(4, CpComm::AllGather);
    let (t_ring, t_gathered) = (step(&ring), step(&gathered));
    assert!(t_gathered > t_ring, "{t_gathered} <= {t_ring}");
    let peak = |w: &Workload| {
        Evaluation::new(w.clone().validate().unwrap())
            .inventory
            .peak_bytes
    };
    assert!(peak(&gathered) > peak(&ring));

    let mut one = context(4, CpComm::AllGather);
    one.outer.cp = 1;
    let e = one.validate().unwrap_err().to_string();
    assert!(
        e.contains("--cp-comm all-gather") && e.contains("--cp 2"),
        "{e}"
    );
}

/// DeepSpeed's lock-step exchanges (`PipeP2p::Lockstep`): a message leaves only once its
/// receiver has finished its previous compute. Each step pairs a stage with one neighbour, so
/// neighbouring pairs drift apart instead of meeting at a barrier: the step is the blocking
/// one's within 1% (a hair shorter where a message no longer travels while its receiver
/// computes, slowing it), far from a barrier's step of two backwards per micro-batch; no
/// virtual stages.
#[test]
fn lockstep_exchanges_pair_neighbours_without_a_barrier() {
    for (pp, layers, m) in [(4, 8, 8), (4, 10, 8), (6, 12, 12)] {
        let b = step(&workload(pp, 1, 1, m, layers, blocking()));
        let l = step(&workload(pp, 1, 1, m, layers, lockstep()));
        assert!(
            (l / b - 1.0).abs() < 0.01,
            "pp {pp}: lockstep {l} vs blocking {b}"
        );
    }
    let e = workload(4, 2, 1, 8, 16, lockstep()).validate().unwrap_err();
    assert!(e.to_string().contains("--pp-p2p lockstep"), "{e}");
}

/// What makes the exchanges lock-step, in the lowered graph: every pipeline receive waits for
/// its stage's previous compute (posted when the receiver gets there; a device's first one has
/// none before it), and never for the send
/// the stage still has pending (DeepSpeed pairs them so that neither side waits for the other
/// first); blocking and async receives are posted at once.
#[test]
fn lockstep_receives_wait_for_their_stages_previous_compute() {
    use metp_sim::schedule::{lower, plan, Devices, LowerOptions, Rounds, Stream, Work};
    let recv_deps = |runtime: Runtime| {
        let w = workload(4, 1, 1, 8, 8, runtime).validate().unwrap();
        let g = lower(
            &w,
            &plan(&w),
            &stage_inventories(&w),
            LowerOptions {
                devices: Devices::All,
                memory: false,
                optimizer: true,
                rounds: Rounds::None,
            },
        );
        g.check().unwrap();
        // Each device's first receive has no compute before it.
        let mut seen = vec![false; g.devices as usize];
        let mut out = Vec::new();
        for t in &g.tasks {
            if let Work::Recv { .. } = t.work {
                if !std::mem::replace(&mut seen[t.device as usize], true) {
                    continue;
                }
                let on_compute = t
                    .deps
                    .iter()
                    .any(|&d| g.tasks[d as usize].stream == Stream::Compute);
                let on_send = t
                    .deps
                    .iter()
                    .any(|&d| matches!(g.tasks[d as usize].work, Work::Send { .. }));
                out.push((on_compute, on_send));
            }
        }
        out
    };
    let lock = recv_deps(lockstep());
    assert!(!lock.is_empty());
    assert!(lock.iter().all(|&(c, s)| c && !s), "{lock:?}");
    for r in [blocking(), Runtime::default()] {
        assert!(recv_deps(r).iter().all(|&(c, s)| !c && !s));
    }
}

/// The composed fast path walks the default schedule only: asked to compose a step with any
/// other schedule option it refuses in words (the evaluation simulates such steps exactly),
/// and composes the default one.
#[test]
fn a_composed_simulation_refuses_another_schedule() {
    use metp_sim::schedule::{plan, Devices};
    let compose = |runtime: Runtime| {
        let w = workload(4, 1, 1, 8, 8, runtime).validate().unwrap();
        metp_sim::sim::simulate_composed(
            &w,
            &plan(&w),
            &stage_inventories(&w),
            LinkModel::Ideal,
            Devices::Distinct,
        )
    };
    assert!(compose(Runtime::default()).is_ok());
    for r in [blocking(), lockstep(), after_backward()] {
        let e = compose(r).map(|_| ()).unwrap_err().to_string();
        assert!(
            e.contains("composed simulation walks the default schedule"),
            "{e}"
        );
    }
}

/// Lazily allocated gradients (PyTorch FSDP2's accumulators, `--grad-buffer lazy`) are held
/// per model chunk from its first backward of the step to its last. Where every forward runs
/// before the first backward (interleaved, as many micro-batches as stages) the first stage's
/// activations peak at its first backward, with only the chunk running it holding gradients;
/// the
/// simulator, which allocates them at the chunk's first backward and frees them after its last,
/// reaches each stage's peak byte for byte. Sharded gradients (ZeRO 2) are held from a chunk's
/// first backward to the step's end.
#[test]
fn lazy_gradients_are_held_from_a_chunks_first_backward_to_its_last() {
    let lazy = Runtime {
        grad_buffer: GradBuffer::Lazy,
        ..Runtime::default()
    };
    let peaks = |w: &Workload| -> Vec<(u128, u128)> {
        stage_inventories(&w.clone().validate().unwrap())
            .iter()
            .map(|i| (i.peak_bytes, i.static_bytes))
            .collect()
    };
    let (held, whole) = (
        workload(2, 2, 1, 2, 8, lazy),
        workload(2, 2, 1, 2, 8, Runtime::default()),
    );
    let (h, p) = (peaks(&held), peaks(&whole));
    let first = &stage_inventories(&held.clone().validate().unwrap())[0];
    let parts = first.held_grads.expect("held per chunk");
    // Stage 0 peaks at its first backward, of its last chunk (two layers): those two layers'
    // gradients are held, not its four layers' and the embedding's.
    assert_eq!(first.held_grad_bytes, 2 * parts.per_layer_bytes);
    assert_eq!(
        p[0].1 - h[0].1,
        2 * parts.per_layer_bytes + parts.embedding_bytes,
        "{h:?} {p:?}"
    );
    assert_eq!(p[0].0 - h[0].0, p[0].1 - h[0].1);
    // A layer of LLaMA-2 7B at p = 2 (about 101 M parameters) in FP32.
    assert!(
        (parts.per_layer_bytes as f64 / 4.04e8 - 1.0).abs() < 0.01,
        "{}",
        parts.per_layer_bytes
    );
    // The simulator holds what the inventory says, no more, and reaches it.
    for w in [&held, &whole] {
        let label = format!("{:?}", w.options.runtime.grad_buffer);
        let e = agrees_with_the_analytic_twin(w, &label);
        let stages = stage_inventories(&e.workload);
        let run = e
            .simulation
            .as_ref()
            .and_then(|s| s.run.as_ref())
            .expect("simulated whole");
        // Every device reaches its stage's peak (devices are numbered by the simulator's
        // rank order, so compared as sets).
        let mut reached: Vec<u128> = run
            .result
            .devices
            .iter()
            .map(|d| d.memory_high_water_bytes)
            .collect();
        let mut peaks: Vec<u128> = stages.iter().map(|i| i.peak_bytes).collect();
        for v in [&mut reached, &mut peaks] {
            v.sort_unstable();
            v.dedup();
        }
        assert_eq!(reached, peaks, "{label}");
    }
    // Sharded gradients (ZeRO 2): held from a chunk's first backward to the step's end. The
    // warm-up holds none, so the peak falls by the shards less those held then; the simulator
    // still reaches each stage's peak.
    let zero2 = |mut w: Workload| {
        w.options.zero = Some(ZeroStage::Zero2);
        w.dp = 2;
        w.hardware.nodes = 1;
        w
    };
    let (held, whole) = (zero2(held), zero2(whole));
    let (h, p) = (peaks(&held), peaks(&whole));
    let first = &stage_inventories(&held.clone().validate().unwrap())[0];
    let parts = first.held_grads.expect("held per chunk");
    assert_eq!(parts.lifetime, GradLifetime::ToStepEnd);
    assert!(h[0].0 < p[0].0, "{h:?} {p:?}");
    assert_eq!(p[0].0 - h[0].0, p[0].1 - h[0].1);
    assert_eq!(first.held_grad_bytes, 2 * parts.per_layer_bytes);
    for w in [&held, &whole] {
        agrees_with_the_analytic_twin(w, "zero 2");
    }
}
