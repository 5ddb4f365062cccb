//! The analytic model and the simulator price the same step plans independently (closed forms
//! vs. events on streams and links); with ideal links they must agree within 1%. Memory is
//! checked the same way: the engine counts the live bytes of the lowered graph's own alloc and
//! free tasks, and its high-water mark must equal the inventory's peak (static + stored + the
//! largest phase's transients + reserved) byte for byte — the lowering frees and allocates in
//! an order that never holds more than the peak rule says, and reaches it.

use super::common::agrees_with_the_analytic_twin;
use metp_sim::config::{
    load_hardware, load_model, GradDtype, MethodId, OptimizerState, Options, WeightExchange,
    Workload, ZeroStage,
};

fn check(w: &Workload, label: &str) {
    let e = agrees_with_the_analytic_twin(w, label);
    let run = e.simulation.and_then(|s| s.run).expect("simulated whole");
    for (d, dev) in run.result.devices.iter().enumerate() {
        assert!(
            dev.memory_high_water_bytes <= e.inventory.peak_bytes,
            "{label}: device {d} holds more than the peak"
        );
    }
}

#[test]
fn ideal_links_agree_within_one_percent_on_a_grid() {
    let (mut checked, mut skipped) = (0, 0);
    for (model, hw) in [("llama2-7b", "dgx-a100-80gb"), ("gpt3-1.3b", "dgx-h100")] {
        let mut m = load_model(model).unwrap();
        // Two layers keep the test fast; every layer is identical, so the agreement per layer
        // is what is being checked.
        m.layers = 2;
        let hardware = load_hardware(hw).unwrap();
        for method in MethodId::ALL {
            for p in [2u64, 3, 4, 8] {
                for seq in [4096u64, 32768] {
                    for (causal, flash) in [(false, true), (true, false)] {
                        let options = Options {
                            causal,
                            flash,
                            ..Options::default()
                        };
                        let w = Workload {
                            model: m.clone(),
                            hardware: hardware.clone(),
                            method,
                            p,
                            dp: 1,
                            outer: metp_sim::config::OuterAxes::default(),
                            seq,
                            micro_batch: 1,
                            micro_batches: 1,
                            options,
                        };
                        if w.clone().validate().is_err() {
                            skipped += 1;
                            continue;
                        }
                        checked += 1;
                        check(
                            &w,
                            &format!(
                                "{model} {hw} {method} p={p} s={seq} causal={causal} flash={flash}"
                            ),
                        );
                    }
                }
            }
        }
    }
    // At p = 3 no method is valid for either model: their 32 and 16 heads are not divisible
    // by 3 (tp, tp-sp, ulysses, metp), nor are 4096 and 32768 tokens (ring, rsa) — 2 models ×
    // 6 methods × 2 lengths × 2 settings = 48 cases refused by validation. Every other case
    // (2, 4 and 8 divide the heads, K/V heads, MLP widths 11008 and 8192, and both lengths
    // twice over) is checked: 2 × 6 × 3 × 2 × 2 = 144.
    assert_eq!((checked, skipped), (144, 48));
}

#[test]
fn metp_variants_agree_when_compute_bound() {
    // The ring relay's pipelining is approximated in closed form; above the overlap threshold
    // (local sequence ≥ F/B) the approximation is within 1%.
    let mut m = load_model("llama2-7b").unwrap();
    m.layers = 2;
    let hardware = load_hardware("dgx-a100-80gb").unwrap();
    for (exchange, buffers, contiguous) in [
        (WeightExchange::Ring, 2, false),
        (WeightExchange::Broadcast, 1, false),
        (WeightExchange::Broadcast, 2, true),
    ] {
        for p in [4u64, 8] {
            let mut options = Options {
                causal: contiguous,
                causal_zigzag: !contiguous,
                ..Options::default()
            };
            options.metp.weight_exchange = exchange;
            options.metp.recv_buffers = buffers;
            let w = Workload {
                model: m.clone(),
                hardware: hardware.clone(),
                method: MethodId::Metp,
                p,
                dp: 1,
                outer: metp_sim::config::OuterAxes::default(),
                seq: 65536,
                micro_batch: 1,
                micro_batches: 2,
                options,
            };
            check(
                &w,
                &format!("metp {exchange:?} buffers={buffers} contiguous={contiguous} p={p}"),
            );
        }
    }
}

#[test]
fn data_parallel_and_zero_agree() {
    let mut m = load_model("gpt3-1.3b").unwrap();
    m.layers = 2;
    let mut hardware = load_hardware("dgx-a100-80gb").unwrap();
    hardware.nodes = 2;
    for method in [
        MethodId::Metp,
        MethodId::Ulysses,
        MethodId::Ring,
        MethodId::TpSp,
    ] {
        let w = Workload {
            model: m.clone(),
            hardware: hardware.clone(),
            method,
            p: 8,
            dp: 2,
            outer: metp_sim::config::OuterAxes::default(),
            seq: 32768,
            micro_batch: 1,
            micro_batches: 1,
            options: Options::default(),
        };
        check(&w, &format!("{method} p=8 dp=2 over two nodes"));
    }
    // The training state's settings: bf16 gradients, a sharded optimizer state (gradients
    // reduce-scattered, weights all-gathered after the step), ZeRO-2.
    for (method, state, zero) in [
        (MethodId::Metp, Some(OptimizerState::Sharded), None),
        (MethodId::TpSp, Some(OptimizerState::Sharded), None),
        (MethodId::Ring, None, Some(ZeroStage::Zero2)),
    ] {
        let w = Workload {
            model: m.clone(),
            hardware: hardware.clone(),
            method,
            p: 8,
            dp: 2,
            outer: metp_sim::config::OuterAxes::default(),
            seq: 32768,
            micro_batch: 1,
            micro_batches: 1,
            options: Options {
                grad_dtype: GradDtype::Bf16,
                optimizer_state: state,
                zero,
                ..Options::default()
            },
        };
        check(
            &w,
            &format!("{method} p=8 dp=2 bf16 grads {state:?} {zero:?}"),
        );
    }
}

/// Issue 21 item 6: the analytic twin's collective time is the simulator's, for every bundled
/// profile, every algorithm its library may pick (its own rules, and every rule made direct or
/// tree), inside a node and across two, every operation, a latency-bound and a bandwidth-bound
/// size, ideal and max-min links. Both take the cost model's plan (`cost::collective::plan`):
/// the simulator moves its transfers as flows, the analytic twin prices the same transfers by
/// the busiest link — which is what used to differ ((p−1)/(p−8) for direct collectives across
/// two nodes, 6.6× for a direct rule through NVSwitch with ideal links).
#[test]
fn every_collective_rule_on_every_fabric_agrees_with_the_simulator() {
    use metp_sim::config::{
        list_names, Algorithm, CollectiveKind, CollectiveRule, DataKind, Scope,
    };
    use metp_sim::cost::CostModel;
    use metp_sim::schedule::{CollectiveOp, Label, Pass, Stream, TaskGraph, Work};
    use metp_sim::sim::{simulate, LinkModel, SimOptions};
    const LABEL: Label = Label {
        pass: Pass::Fwd,
        layer: None,
        block: "mlp",
        name: "collective",
        outer: None,
        step: None,
        micro_batch: 0,
    };
    let mut checked = 0;
    for name in list_names(DataKind::Hardware) {
        let base = load_hardware(&name).unwrap();
        let gpn = base.gpus_per_node as u32;
        let k = gpn.min(4);
        let intra: Vec<u32> = (0..gpn.min(8)).collect();
        let inter: Vec<u32> = (0..k).chain(gpn..gpn + k).collect();
        let rule = |a| {
            vec![CollectiveRule {
                op: CollectiveKind::Any,
                scope: Scope::Any,
                max_bytes: None,
                algorithm: a,
                source: "test".into(),
            }]
        };
        for rules in [
            base.collectives.clone(),
            rule(Algorithm::Direct),
            rule(Algorithm::Tree),
        ] {
            let mut hw = base.clone();
            hw.nodes = 2;
            hw.collectives = rules;
            let cost = CostModel::new(&hw);
            for group in [&intra, &inter] {
                for op in [
                    CollectiveOp::AllReduce,
                    CollectiveOp::AllGather,
                    CollectiveOp::ReduceScatter,
                    CollectiveOp::AllToAll,
                    CollectiveOp::Broadcast { root: group[1] },
                    CollectiveOp::Reduce { root: group[2] },
                ] {
                    for bytes in [4096u64, 64 << 20] {
                        let plan = cost.collective_plan(op, group, bytes);
                        let devices = group.iter().copied().max().unwrap() + 1;
                        let mut g = TaskGraph::new(devices);
                        for &d in group {
                            g.add(
                                d,
                                Stream::Comm(0),
                                Work::Collective {
                                    op,
                                    id: 1,
                                    group: group.clone(),
                                    bytes,
                                },
                                vec![],
                                LABEL,
                            );
                        }
                        for link in [LinkModel::Ideal, LinkModel::MaxMin] {
                            let sim = simulate(&g, &hw, link, SimOptions::default()).unwrap();
                            let t = sim.makespan_ps as f64 * 1e-12;
                            // Each step rounds its latency and its flows up to the picosecond.
                            let slack =
                                2e-12 * plan.phases.iter().map(|p| p.steps as f64).sum::<f64>();
                            assert!(
                                (t - plan.time_s).abs() <= slack + 1e-9 * plan.time_s,
                                "{name} {:?} {op:?} n={} {bytes} B {link:?}: simulated {t} s, \
                                 analytic {} s ({:?}/{:?})",
                                hw.collectives.first().map(|r| r.algorithm),
                                group.len(),
                                plan.time_s,
                                plan.algorithm,
                                plan.protocol
                            );
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    // 13 profiles × 3 rule sets × 2 groups × 6 operations × 2 sizes × 2 link models.
    assert_eq!(checked, 13 * 3 * 2 * 6 * 2 * 2);
}

/// The same at the step level: a method whose collectives go direct across two nodes (Ulysses'
/// all-to-all on the xGMI mesh, TP's all-reduce with a direct rule through NVSwitch) agrees
/// with the simulator within 1% on ideal links, exposed communication included.
#[test]
fn direct_collectives_across_nodes_agree_at_the_step_level() {
    use metp_sim::config::{Algorithm, CollectiveKind, CollectiveRule, OuterAxes, Scope};
    let mut m = load_model("llama2-7b").unwrap();
    m.layers = 2;
    let mut direct_h100 = load_hardware("dgx-h100").unwrap();
    direct_h100.collectives = vec![CollectiveRule {
        op: CollectiveKind::Any,
        scope: Scope::Any,
        max_bytes: None,
        algorithm: Algorithm::Direct,
        source: "test".into(),
    }];
    for (hw, method, p) in [
        (load_hardware("mi300x-8").unwrap(), MethodId::Ulysses, 16u64),
        (load_hardware("mi300x-8").unwrap(), MethodId::TpSp, 16),
        (direct_h100.clone(), MethodId::Tp, 8),
        (direct_h100, MethodId::Tp, 16),
    ] {
        let mut hardware = hw;
        hardware.nodes = 2;
        let w = Workload {
            model: m.clone(),
            hardware,
            method,
            p,
            dp: 1,
            outer: OuterAxes::default(),
            seq: 16384,
            micro_batch: 1,
            micro_batches: 1,
            options: Options::default(),
        };
        let label = format!("{} {method} p={p}", w.hardware.name);
        let e = agrees_with_the_analytic_twin(&w, &label);
        let sim = e.simulation.as_ref().unwrap().times;
        let (a, s) = (
            e.estimate.exposed_communication_s,
            sim.exposed_communication_s,
        );
        assert!(
            (a - s).abs() <= 0.01 * sim.step_time_s,
            "{label}: exposed communication analytic {a} s vs simulated {s} s"
        );
    }
}

/// Where nodes do not divide the layout — GB200 NVL72 racks of 72 GPUs filled in rank order,
/// 128 GPUs as TP 8 × PP 4 × DP 4 — the third stage's data-parallel groups and pipeline pieces
/// straddle the two racks and cross InfiniBand while device 0's stay on NVLink. The closed form
/// prices each stage's synchronisations and gathers over its group that spans the most nodes
/// and each pipeline message by its slowest piece, so it follows the simulation there; priced
/// on device 0's groups it was 12–16% below it (a Nemotron-4 340B layer, 16 layers).
#[test]
fn groups_that_straddle_nodes_are_priced_by_the_closed_form_as_simulated() {
    let dir = tempfile::tempdir().unwrap();
    let mut model: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("runs/models/nemotron4-340b.json"),
        )
        .unwrap(),
    )
    .unwrap();
    model["layers"] = 16.into();
    let path = dir.path().join("nemotron-16l.json");
    std::fs::write(&path, serde_json::to_vec(&model).unwrap()).unwrap();
    for gather in ["after-step", "overlapped"] {
        let (twin, sim) = on_two_racks_of_72(&[
            "--model",
            path.to_str().unwrap(),
            "--method",
            "tp-sp",
            "--p",
            "8",
            "--pp",
            "4",
            "--pp-interleave",
            "2",
            "--dp",
            "4",
            "--global-batch",
            "32",
            "--seq",
            "4k",
            "--zero",
            "1",
            "--causal",
            "--param-gather",
            gather,
        ]);
        let gap = twin / sim - 1.0;
        assert!(
            gap.abs() < 0.03,
            "{gather}: closed form {twin} s against {sim} s"
        );
    }
}

/// The same for the method's own group: Ulysses over p = 16 or 32 consecutive GPUs on racks of
/// 72 filled in rank order puts the group at GPUs 64–79 (or 64–95) across two racks, its
/// all-to-alls over InfiniBand; the closed form prices the method group that spans the most
/// nodes and follows the simulation (it was 20% and 26% below it on device 0's group). At 16k,
/// one sequence per replica, the closed form stays 18–20% below on segments of 64 as on racks
/// of 72 — a gap of its own, not the straddling one: the data-parallel synchronisations sharing
/// NICs in the max-min simulation (24 ms exposed in the closed form, 42 ms simulated; with
/// ideal links the simulation gives the closed form's 81.5 ms step).
#[test]
fn method_groups_that_straddle_nodes_are_priced_by_the_closed_form_as_simulated() {
    for (p, dp, batch) in [("16", "8", "16"), ("32", "4", "8")] {
        let (twin, sim) = on_two_racks_of_72(&[
            "--model",
            "llama2-7b",
            "--method",
            "ulysses",
            "--p",
            p,
            "--dp",
            dp,
            "--global-batch",
            batch,
            "--seq",
            "64k",
            "--causal",
        ]);
        assert!(
            (twin / sim - 1.0).abs() < 0.03,
            "p = {p}: closed form {twin} s against {sim} s"
        );
    }
}

/// `simulate ARGS` on two GB200 NVL72 racks filled in rank order: (closed form, simulated)
/// step seconds.
fn on_two_racks_of_72(args: &[&str]) -> (f64, f64) {
    let mut all = vec!["simulate", "--hw", "gb200-nvl72", "--nodes", "2"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--format", "json"]);
    let v = super::common::cli_json(&all);
    let sim = v["step_time_s"].as_f64().expect("step_time_s");
    let twin = v["analytic"]["step_time_s"]
        .as_f64()
        .expect("analytic.step_time_s");
    (twin, sim)
}
