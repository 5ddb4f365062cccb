//! Parameter state: 18 bytes per parameter (bf16 weights 2 + fp32 main gradients 4 + fp32
//! master weights, Adam m and v 12; Megatron-LM `theoretical_memory_usage.py`), and ZeRO
//! (Rajbhandari et al. 2019) over N ranks: stage 1 = 6Ψ + 12Ψ/N, stage 2 = 2Ψ + 16Ψ/N,
//! stage 3 = 18Ψ/N.

use crate::common::inventory;
use metp_sim::config::{load_model, MethodId, Options, ZeroStage};
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
        // At one micro-batch ZeRO-2's reduce-scatter is about half ZeRO-1's all-reduce
        // (extra_one ≈ −RS); at four it reduce-scatters four times against one all-reduce
        // (extra ≈ 4·RS − 2·RS): three more reduce-scatters than at one. Communication time is
        // the time some transfer is in flight, so overlapping ones count once: at least 1.5 RS.
        let extra_one = z2_one.metrics.communication_s - z1_one.metrics.communication_s;
        let extra = z2.metrics.communication_s - z1.metrics.communication_s;
        assert!(extra_one < 0.0, "pp {pp}: {extra_one}");
        assert!(
            extra - extra_one > 1.5 * extra_one.abs(),
            "pp {pp}: ZeRO-2 adds {extra} s of communication over ZeRO-1 at 4 micro-batches, \
             {extra_one} s at one"
        );
    }
}
