//! Parameter state: 18 bytes per parameter (bf16 weights 2 + fp32 main gradients 4 + fp32
//! master weights, Adam m and v 12; Megatron-LM `theoretical_memory_usage.py`), and ZeRO
//! (Rajbhandari et al. 2019) over N ranks: stage 1 = 6Ψ + 12Ψ/N, stage 2 = 2Ψ + 16Ψ/N,
//! stage 3 = 18Ψ/N.

use crate::common::inventory;
use metp_sim::config::{load_model, GradDtype, MethodId, OptimizerState, Options, ZeroStage};
use metp_sim::memory::Kind;

use crate::common::{gpt, workload};

fn static_bytes(method: MethodId, p: u64, dp: u64, zero: ZeroStage) -> (u128, u128) {
    let model = gpt(4096, 32, 4);
    let psi = model.total_params() as u128;
    let mut w = workload(
        model,
        method,
        p,
        4096,
        Options {
            zero: Some(zero),
            ..Options::default()
        },
    );
    w.dp = dp;
    let inv = inventory(&w).unwrap();
    (inv.static_bytes, psi)
}

#[test]
fn replicated_weights_cost_18_bytes_per_parameter() {
    for m in [MethodId::Ulysses, MethodId::Ring, MethodId::Rsa] {
        let (bytes, psi) = static_bytes(m, 4, 1, ZeroStage::Zero0);
        assert_eq!(bytes, 18 * psi, "{m}");
    }
}

#[test]
fn zero_stages_shard_over_dp_times_p_for_replicated_methods() {
    // N = dp × p = 2 × 4 = 8. The fixture's Ψ is divisible by 8, so no padding enters.
    let n = 8u128;
    let (_, psi) = static_bytes(MethodId::Ulysses, 4, 2, ZeroStage::Zero0);
    assert_eq!(psi % n, 0);
    let (z1, _) = static_bytes(MethodId::Ulysses, 4, 2, ZeroStage::Zero1);
    let (z2, _) = static_bytes(MethodId::Ulysses, 4, 2, ZeroStage::Zero2);
    let (z3, _) = static_bytes(MethodId::Ulysses, 4, 2, ZeroStage::Zero3);
    assert_eq!(z1, 6 * psi + 12 * psi / n);
    assert_eq!(z2, 2 * psi + 16 * psi / n);
    assert_eq!(z3, 18 * psi / n);
}

#[test]
fn weight_sharding_methods_split_layers_and_vocabulary_by_p() {
    // Per device: layer GEMM weights / p, embedding / p (vocabulary-parallel, tied head), all
    // norm weights replicated. Ψ_local × 18 bytes.
    let model = gpt(4096, 32, 4);
    let p = 4u128;
    let layers = model.layers as u128;
    let gemm = layers * (model.attention_params_per_layer() + model.mlp_params_per_layer()) as u128;
    let norms = (2 * layers + 1) * model.norm_params() as u128;
    let emb = model.embedding_params() as u128;
    let local = gemm / p + norms + emb / p;
    for m in [MethodId::Tp, MethodId::TpSp, MethodId::Metp] {
        let w = workload(model.clone(), m, 4, 4096, Options::default());
        assert_eq!(inventory(&w).unwrap().static_bytes, 18 * local, "{m}");
    }
}

#[test]
fn zero3_adds_a_gathered_layer_transient() {
    let mut w = workload(
        gpt(4096, 32, 4),
        MethodId::Ring,
        4,
        4096,
        Options {
            zero: Some(ZeroStage::Zero3),
            ..Options::default()
        },
    );
    w.dp = 1;
    let inv = inventory(&w).unwrap();
    let gathered = inv
        .tensors
        .iter()
        .find(|t| t.name == "zero3.gathered_weights")
        .expect("zero-3 gathers layers");
    assert_eq!(gathered.kind, Kind::Transient);
    // Two layers' bf16 weights (current + prefetch): 2 × 2 × (12h² + 4h) for a GPT layer.
    let h = 4096u128;
    assert_eq!(gathered.bytes_each, 2 * 2 * (12 * h * h + 4 * h));
}

#[test]
fn llama2_7b_has_its_published_parameter_count() {
    // 6,738,415,616 parameters (Hugging Face meta-llama/Llama-2-7b-hf): 32 layers of
    // 4·4096² attention + 3·4096·11008 MLP + 2·4096 RMSNorm, a final RMSNorm of 4096, and
    // untied 32000 × 4096 embedding and head.
    let m = load_model("llama2-7b").unwrap();
    assert_eq!(m.total_params(), 6_738_415_616);
}

/// Static bytes of ulysses at p = 4, dp = 2 (a ZeRO group of N = 8) under each gradient dtype,
/// optimizer-state placement and ZeRO stage (`config::precision`).
fn state_bytes(
    grad: GradDtype,
    state: Option<OptimizerState>,
    zero: Option<ZeroStage>,
) -> (u128, u128) {
    let model = gpt(4096, 32, 4);
    let psi = model.total_params() as u128;
    let mut w = workload(
        model,
        MethodId::Ulysses,
        4,
        4096,
        Options {
            zero,
            grad_dtype: grad,
            optimizer_state: state,
            ..Options::default()
        },
    );
    w.dp = 2;
    (inventory(&w).unwrap().static_bytes, psi)
}

/// TP over 4 devices of a 4-layer GPT with hidden size 4096 at 4k, over `dp` replicas, with
/// `options` (the plan tests' workload).
fn tp4(options: Options, dp: u64) -> metp_sim::config::Workload {
    let mut w = workload(gpt(4096, 32, 4), MethodId::Tp, 4, 4096, options);
    w.dp = dp;
    w
}

/// The table of `config::precision`, over N = dp × p = 8 ranks (Ψ divisible by 8, no padding):
/// Megatron Core's distributed-optimizer row for bf16 parameters with fp32 gradients (18, and
/// 6 + 12/d sharded), the ZeRO paper's 16 bytes with 16-bit gradients (and 4 + 12/d sharded),
/// ZeRO-2's 2 + (g + 12)/N and ZeRO-3's (2 + g + 12)/N.
#[test]
fn gradient_dtype_and_optimizer_state_follow_the_formulas() {
    use GradDtype::{Bf16, Fp32};
    use OptimizerState::{Replicated, Sharded};
    let n = 8u128;
    let (fp32_rep, psi) = state_bytes(Fp32, Some(Replicated), None);
    assert_eq!(psi % n, 0);
    assert_eq!(fp32_rep, 18 * psi);
    assert_eq!(state_bytes(Bf16, Some(Replicated), None).0, 16 * psi);
    assert_eq!(
        state_bytes(Fp32, Some(Sharded), Some(ZeroStage::Zero1)).0,
        6 * psi + 12 * psi / n
    );
    assert_eq!(
        state_bytes(Bf16, Some(Sharded), Some(ZeroStage::Zero1)).0,
        4 * psi + 12 * psi / n
    );
    assert_eq!(
        state_bytes(Bf16, None, Some(ZeroStage::Zero2)).0,
        2 * psi + 14 * psi / n
    );
    assert_eq!(
        state_bytes(Bf16, None, Some(ZeroStage::Zero3)).0,
        16 * psi / n
    );
    // A sharded placement with the automatic stage is the distributed optimizer (ZeRO-1) for
    // the methods that shard weights; ulysses's automatic stage 3 already shards it.
    assert_eq!(
        state_bytes(Fp32, Some(Sharded), None).0,
        state_bytes(Fp32, None, Some(ZeroStage::Zero3)).0
    );
    let model = gpt(4096, 32, 4);
    let mut w = workload(model, MethodId::Tp, 4, 4096, Options::default());
    w.dp = 2;
    w.options.optimizer_state = Some(Sharded);
    assert_eq!(w.zero_stage(), ZeroStage::Zero1);
    // A placement that contradicts an explicit stage is refused in one line.
    w.options.zero = Some(ZeroStage::Zero0);
    let e = w.clone().validate().unwrap_err().to_string();
    assert!(
        e.contains("contradicts ZeRO stage 0") && !e.contains('\n'),
        "{e}"
    );
}

/// Communication: a replicated optimizer state all-reduces the gradients in their dtype; a
/// sharded one reduce-scatters them and all-gathers the bf16 weights after the step; ZeRO-3
/// gathers weights per layer instead. Per layer and device, with Ψ_l the local parameters of
/// a layer as the plan counts them (tp at p = 4: a GPT layer's 12h² GEMM and 4h LayerNorm
/// parameters, / 4).
#[test]
fn gradient_communication_follows_the_dtype_and_the_placement() {
    use metp_sim::schedule::{plan, CollectiveOp};
    let h = 4096u64;
    let layer = (12 * h * h + 4 * h).div_ceil(4);
    for (grad, state, zero, op, grad_bytes, gather) in [
        (
            GradDtype::Fp32,
            OptimizerState::Replicated,
            None,
            CollectiveOp::AllReduce,
            4,
            0,
        ),
        (
            GradDtype::Bf16,
            OptimizerState::Replicated,
            None,
            CollectiveOp::AllReduce,
            2,
            0,
        ),
        (
            GradDtype::Fp32,
            OptimizerState::Sharded,
            None,
            CollectiveOp::ReduceScatter,
            4,
            2,
        ),
        (
            GradDtype::Bf16,
            OptimizerState::Sharded,
            None,
            CollectiveOp::ReduceScatter,
            2,
            2,
        ),
        (
            GradDtype::Bf16,
            OptimizerState::Sharded,
            Some(ZeroStage::Zero2),
            CollectiveOp::ReduceScatter,
            2,
            2,
        ),
    ] {
        let w = tp4(
            Options {
                grad_dtype: grad,
                optimizer_state: Some(state),
                zero,
                ..Options::default()
            },
            2,
        );
        let pl = plan(&w.validate().unwrap());
        let label = format!("{grad:?} {state:?} {zero:?}");
        assert_eq!(pl.grad_sync_op, op, "{label}");
        assert_eq!(pl.layer_grad_sync_bytes, grad_bytes * layer, "{label}");
        assert_eq!(pl.layer_param_gather_bytes, gather * layer, "{label}");
        assert_eq!(pl.zero3_gather_bytes, 0, "{label}");
    }
    // ZeRO-3: gradients reduce-scattered in their dtype, weights gathered per layer (bf16),
    // nothing gathered after the step.
    let w = tp4(
        Options {
            grad_dtype: GradDtype::Bf16,
            zero: Some(ZeroStage::Zero3),
            ..Options::default()
        },
        2,
    );
    let pl = plan(&w.validate().unwrap());
    assert_eq!(pl.layer_grad_sync_bytes, 2 * layer);
    assert_eq!(pl.zero3_gather_bytes, 2 * layer);
    assert_eq!(pl.layer_param_gather_bytes, 0);
}

/// ZeRO ≥ 2 keeps only a shard of the gradients (the inventory holds no full gradient buffer),
/// so every micro-batch's gradients are reduce-scattered as its backward ends — DeepSpeed's
/// ZeRO-2 and FSDP without `no_sync` — while ZeRO 0/1 accumulate and synchronise once. With
/// four micro-batches the ZeRO-2 step moves four times the gradient bytes of the ZeRO-1 step
/// (its communication grows by three times the ZeRO-1 synchronisation), overlapped with the
/// backward and the next forward; the analytic twin follows the simulator within 1% with
/// ideal links, without a pipeline and with one.
#[test]
fn zero2_reduce_scatters_every_micro_batch() {
    use crate::common::agrees_with_the_analytic_twin;
    use metp_sim::config::{load_hardware, OuterAxes, Workload};
    let mut model = load_model("llama2-7b").unwrap();
    model.layers = 4;
    let mut hardware = load_hardware("dgx-a100-80gb").unwrap();
    hardware.nodes = 4;
    let step = |zero: ZeroStage, pp: u64, m: u64| {
        let w = Workload {
            model: model.clone(),
            hardware: hardware.clone(),
            method: MethodId::TpSp,
            p: 8,
            dp: 2,
            outer: OuterAxes {
                pp,
                interleave: 1,
                cp: 1,
            },
            seq: 4096,
            micro_batch: 1,
            micro_batches: m,
            options: Options {
                zero: Some(zero),
                ..Options::default()
            },
        };
        let label = format!("ZeRO {zero:?}, pp {pp}, {m} micro-batches");
        agrees_with_the_analytic_twin(&w, &label)
    };
    for pp in [1, 2] {
        let (z1, z2) = (step(ZeroStage::Zero1, pp, 4), step(ZeroStage::Zero2, pp, 4));
        let (z1_one, z2_one) = (step(ZeroStage::Zero1, pp, 1), step(ZeroStage::Zero2, pp, 1));
        // At one micro-batch ZeRO-1 and ZeRO-2 move the same bytes (a reduce-scatter of the
        // gradients, an all-gather of the updated weights); at four ZeRO-2 reduce-scatters
        // three more times. Communication time is the time some transfer is in flight, so
        // overlapping ones count once: the difference is clearly positive, not equal.
        let extra_one = z2_one.metrics.communication_s - z1_one.metrics.communication_s;
        let extra = z2.metrics.communication_s - z1.metrics.communication_s;
        eprintln!("pp {pp}: ZeRO-2 - ZeRO-1 communication {extra_one} s at 1, {extra} s at 4");
        assert!(
            extra > 1e-3 && extra > 10.0 * extra_one.abs(),
            "pp {pp}: ZeRO-2 adds {extra} s of communication over ZeRO-1 at 4 micro-batches, \
             {extra_one} s at one"
        );
    }
}

/// Gradient accumulation (`config::GradAccumulation`): fused into the weight-gradient GEMMs
/// (the default) adds no kernel; a separate pass adds one element-wise kernel at the end of each
/// layer's backward, moving 2 + 2·g bytes per local parameter (the new 16-bit gradient read, the
/// accumulator read and written), or under ZeRO 2 the device's shard of the reduced gradients
/// (3·g bytes per sharded parameter). The step grows by exactly that kernel's time per layer and
/// micro-batch where nothing overlaps it, and the analytic twin agrees with the simulator.
#[test]
fn a_separate_gradient_accumulation_pass_costs_its_bytes_per_layer_and_micro_batch() {
    use metp_sim::config::GradAccumulation;
    use metp_sim::cost::CostModel;
    use metp_sim::schedule::{plan, KernelShape, Stage};
    let h = 4096u64;
    let layer = (12 * h * h + 4 * h).div_ceil(4);
    let with = |acc: GradAccumulation, grad: GradDtype, zero: ZeroStage, dp: u64, m: u64| {
        let mut w = tp4(
            Options {
                grad_dtype: grad,
                grad_accumulation: acc,
                zero: Some(zero),
                ..Options::default()
            },
            dp,
        );
        w.micro_batches = m;
        w
    };
    // The pass's bytes, from the plan's last backward block of a layer.
    let pass_bytes = |w: &metp_sim::config::Workload| -> Vec<u64> {
        let pl = plan(&w.clone().validate().unwrap());
        pl.layer_bwd
            .iter()
            .flat_map(|b| &b.stages)
            .flat_map(|s| match s {
                Stage::Compute(ks) => ks.iter().collect::<Vec<_>>(),
                _ => Vec::new(),
            })
            .filter(|k| k.name == "grad-accumulate")
            .map(|k| match k.shape {
                KernelShape::Elementwise { bytes } => bytes,
                _ => panic!("the pass is memory-bound"),
            })
            .collect()
    };
    use GradAccumulation::{Fused, Separate};
    use ZeroStage::{Zero0, Zero2};
    assert!(pass_bytes(&with(Fused, GradDtype::Fp32, Zero0, 1, 4)).is_empty());
    assert_eq!(
        pass_bytes(&with(Separate, GradDtype::Fp32, Zero0, 1, 4)),
        vec![10 * layer]
    );
    assert_eq!(
        pass_bytes(&with(Separate, GradDtype::Bf16, Zero0, 1, 4)),
        vec![6 * layer]
    );
    // ZeRO 2 over dp 2: the shard of the reduced gradients, half the layer's, 3 × 4 bytes.
    assert_eq!(
        pass_bytes(&with(Separate, GradDtype::Fp32, Zero2, 2, 4)),
        vec![12 * layer.div_ceil(2)]
    );
    // A single replica has nothing to shard: ZeRO 2 accumulates the whole gradients.
    assert_eq!(
        pass_bytes(&with(Separate, GradDtype::Fp32, Zero2, 1, 4)),
        vec![10 * layer]
    );
    // The step: 4 micro-batches × 4 layers of the pass, nothing to hide it under.
    let fused = with(Fused, GradDtype::Fp32, Zero0, 1, 4);
    let separate = with(Separate, GradDtype::Fp32, Zero0, 1, 4);
    let t_fused = crate::common::agrees_with_the_analytic_twin(&fused, "fused")
        .metrics
        .step_time_s;
    let t_separate = crate::common::agrees_with_the_analytic_twin(&separate, "separate")
        .metrics
        .step_time_s;
    let pass_s = CostModel::new(&separate.hardware)
        .kernel_s(&KernelShape::Elementwise { bytes: 10 * layer });
    let grown = t_separate - t_fused;
    assert!(
        (grown / (16.0 * pass_s) - 1.0).abs() < 1e-6,
        "the step grew {grown:.6e} s, 16 passes take {:.6e} s",
        16.0 * pass_s
    );
}

/// ZeRO-3 gathers each layer's weights one layer ahead (`schedule::lower::sync`), as FSDP's
/// prefetch runs it and as the memory inventory's two gathered layers assume: in every run of
/// layers, forward and backward, a layer's compute waits for its own gather, and the gather of
/// the layer after it depends on nothing the layer computes — it flows beside it. The first
/// layer's gather of each run waits for what came before.
///
/// With FSDP2's per-parameter gathers (`--zero3-gather per-parameter`) that first kernel is the
/// copy of the gathered weights out of the all-gather buffer, 4 bytes per local parameter of
/// the layer, once per gather; flat gathers copy nothing.
#[test]
fn zero3_gathers_flow_one_layer_ahead_of_the_compute() {
    use metp_sim::config::{Runtime, Zero3Gather};
    for how in [Zero3Gather::Flat, Zero3Gather::PerParameter] {
        let mut model = load_model("llama2-7b").unwrap();
        model.layers = 4;
        let layer_params = model.attention_params_per_layer()
            + model.mlp_params_per_layer()
            + 2 * model.norm_params();
        let o = Options {
            zero: Some(ZeroStage::Zero3),
            runtime: Runtime {
                zero3_gather: how,
                ..Runtime::default()
            },
            ..Options::default()
        };
        let mut w = workload(model, MethodId::Ulysses, 4, 4096, o);
        w.dp = 2;
        let w = w.validate().unwrap();
        let g = crate::common::lowered_step(&w);
        let copies = crate::common::pass_bytes(&g, "zero3-copy-out", |_| true);
        match how {
            Zero3Gather::Flat => assert!(copies.is_empty(), "flat gathers copy nothing"),
            Zero3Gather::PerParameter => {
                assert_eq!(copies.len(), 8, "one copy-out per gather");
                assert!(copies.iter().all(|&b| b == 4 * layer_params), "{copies:?}");
            }
        }
        gathers_flow_ahead(&g, how == Zero3Gather::PerParameter);
    }
}

/// The checks of [`zero3_gathers_flow_one_layer_ahead_of_the_compute`] on one lowered step.
fn gathers_flow_ahead(g: &metp_sim::schedule::TaskGraph, copy_out: bool) {
    use metp_sim::schedule::{Pass, Work};
    let on0 = |t: &&metp_sim::schedule::Task| t.device == 0;
    for pass in [Pass::Fwd, Pass::Bwd] {
        let gathers: Vec<(usize, u32)> = g
            .tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| on0(t) && t.label.pass == pass && t.label.name == "zero3-all-gather")
            .map(|(i, t)| (i, t.label.layer.unwrap()))
            .collect();
        assert_eq!(gathers.len(), 4, "{pass:?}: one gather per layer");
        let computes = |layer: u32| -> Vec<usize> {
            g.tasks
                .iter()
                .enumerate()
                .filter(|(_, t)| {
                    on0(t)
                        && t.label.pass == pass
                        && t.label.layer == Some(layer)
                        && matches!(t.work, Work::Compute { .. })
                })
                .map(|(i, _)| i)
                .collect()
        };
        for (k, &(gather, layer)) in gathers.iter().enumerate() {
            // The layer's first kernel waits for its gather (the copy-out, where there is one).
            let first = computes(layer)[0];
            assert!(
                g.tasks[first].deps.contains(&(gather as u32)),
                "{pass:?} layer {layer}: its compute does not wait for its gather"
            );
            assert_eq!(
                g.tasks[first].label.name == "zero3-copy-out",
                copy_out,
                "{pass:?} layer {layer}: first kernel {}",
                g.tasks[first].label.name
            );
            if k == 0 {
                continue;
            }
            // It was issued as the layer before it started, after that layer's own gather.
            let before = gathers[k - 1];
            let beside = computes(before.1);
            let deps = &g.tasks[gather].deps;
            assert!(deps.contains(&(before.0 as u32)), "{pass:?} layer {layer}");
            assert!(
                deps.iter().all(|d| !beside.contains(&(*d as usize))),
                "{pass:?} layer {layer}: its gather waits for the layer computing beside it"
            );
            assert!(
                gather < beside[0],
                "{pass:?} layer {layer}: issued after it started"
            );
        }
    }
}
