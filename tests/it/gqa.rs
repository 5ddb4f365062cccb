//! Grouped-query attention with more devices than K/V heads (issue 21, item 2): one rule in
//! every method that splits heads — the K/V heads must divide the ways heads are split, as
//! Megatron-LM requires (`divide(num_query_groups, tp_size)`) — refused in one line by the
//! memory inventories, schedules and analytic model (all behind `Workload::validate`), and by
//! the executed units (`UnitSpec::check`); ring attention, which splits no heads, runs.

use crate::common::{inventory, workload};
use metp_sim::config::{load_model, ExecMethod, MethodId, Options, Unit, UnitShape, UnitSpec};
use metp_sim::memory::names;

/// LLaMA-3-8B at p = 16: 8 K/V heads cannot split 16 ways. Splitting the weights 1/16 (the old
/// behaviour) gave 83,886,080 attention parameters per device; replicating K/V heads would give
/// 100,663,296; Megatron refuses, and so does every head-splitting method here.
#[test]
fn llama3_8b_at_p16_is_refused_by_every_head_splitting_method() {
    let m = load_model("llama3-8b").unwrap();
    assert_eq!((m.heads, m.kv_heads), (32, 8));
    for method in [
        MethodId::Tp,
        MethodId::TpSp,
        MethodId::Ulysses,
        MethodId::Metp,
    ] {
        let w = workload(m.clone(), method, 16, 16384, Options::default());
        let e = w.validate().unwrap_err().to_string();
        assert!(
            e.contains("kv_heads (8) is not divisible by") && !e.contains('\n'),
            "{method}: {e}"
        );
    }
    let ring = workload(m.clone(), MethodId::Ring, 16, 16384, Options::default());
    assert!(ring.validate().is_ok());
}

/// Where the K/V heads divide, each device holds whole heads: at p = 8 one K/V head and four
/// query heads per device, 4096 · 128 · (2·4 + 2·1) = 5,242,880 attention parameters per layer,
/// 167,772,160 over 32 layers — exactly 1/8 of the model's attention weights.
#[test]
fn where_the_kv_heads_divide_the_weights_split_exactly() {
    let m = load_model("llama3-8b").unwrap();
    let w = workload(m.clone(), MethodId::Tp, 8, 16384, Options::default());
    let inv = inventory(&w).unwrap();
    let attn = inv
        .tensors
        .iter()
        .find(|t| t.name == names::ATTN_WEIGHTS)
        .unwrap();
    assert_eq!(attn.bytes(), 2 * 167_772_160);
    assert_eq!(m.layers * m.attention_params_per_layer(), 8 * 167_772_160);
}

/// METP's head groups obey the same rule (G = 16 groups at p = 8 would need 16 K/V heads), and
/// so do the executed units: the spec `run` builds from a model refuses 8 K/V heads over 16
/// groups with the same words.
#[test]
fn metp_head_groups_and_executed_units_follow_the_same_rule() {
    let m = load_model("llama3-8b").unwrap();
    let mut o = Options::default();
    o.metp.head_groups = Some(16);
    let e = workload(m, MethodId::Metp, 8, 16384, o)
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("kv_heads (8) is not divisible by head groups (16)"),
        "{e}"
    );
    let shape = UnitShape {
        b: 1,
        s: 256,
        h: 256,
        a: 32,
        f: 512,
        p: 16,
    };
    for method in [ExecMethod::Metp, ExecMethod::Tp] {
        let mut spec = UnitSpec::new(Unit::Attention, method, shape);
        spec.kv_heads = 8;
        let e = spec.check().unwrap_err().to_string();
        assert!(
            e.contains("kv_heads (8) is not divisible by head groups (16)"),
            "{e}"
        );
        spec.kv_heads = 16;
        spec.check().unwrap();
    }
}

/// The CUDA backend's TP attention unit holds every buffer to its end, so its device-memory
/// bound (`backend::cuda::layout::tp_attention_bytes`, what a run is checked against before it
/// starts) must cover the CPU runtime's tracked high-water mark of the same program — the same
/// buffers under the same names, freed as it goes — with and without grouped-query attention,
/// fused and unfused; and K/V heads shared by two query heads save bytes in both.
#[test]
fn cuda_tp_attention_bound_covers_the_cpu_tracked_peak_with_gqa() {
    use metp_sim::backend::cpu::units::run_unit;
    use metp_sim::backend::cuda::layout::tp_attention_bytes;
    use metp_sim::backend::unit::{RunSpec, Shape};
    let sh = Shape {
        b: 1,
        s: 64,
        h: 256,
        a: 4,
        f: 512,
        p: 2,
    };
    for fused in [true, false] {
        let mut peaks = Vec::new();
        for kv in [4, 2] {
            let mut spec = RunSpec::new(Unit::Attention, ExecMethod::Tp, sh);
            spec.kv_heads = kv;
            spec.fused = fused;
            let r = run_unit(&spec).unwrap();
            assert!(r.max_rel_error < 2e-2, "kv={kv}: {:?}", r.errors);
            let bound = tp_attention_bytes(&sh, kv, fused);
            eprintln!(
                "kv={kv} fused={fused}: cpu tracked {} B, cuda bound {bound} B",
                r.tracked_peak_bytes
            );
            assert!(bound >= r.tracked_peak_bytes, "kv={kv} fused={fused}");
            assert!(2 * r.tracked_peak_bytes > bound, "kv={kv} fused={fused}");
            peaks.push((r.tracked_peak_bytes, bound));
        }
        assert!(
            peaks[1].0 < peaks[0].0 && peaks[1].1 < peaks[0].1,
            "{peaks:?}"
        );
    }
}

/// PyTorch eager layer ops keep what their autograd saves (`memory::layer`): SDPA the keys and
/// values copied out to every query head, the product the silu output, eager RMSNorm an FP32
/// copy of each norm's input (4 bytes per element; the normalised bf16 values it also keeps take the
/// place of the bf16 input, which nothing saves). Fused kernels keep
/// none of them; `eager-fused-norm` keeps all but the norms'. Exact bytes per layer on tp-sp,
/// LLaMA 3 8B (GQA 32/8, SwiGLU, RMSNorm), p = 8, s = 8192, no recomputation.
#[test]
fn eager_layer_ops_keep_what_autograd_saves() {
    use metp_sim::config::{LayerOps, Runtime};
    let model = load_model("llama3-8b").unwrap();
    let (s, h, f, p) = (
        8192u128,
        model.hidden as u128,
        model.ffn_hidden as u128,
        8u128,
    );
    let kv = (model.kv_heads * model.head_dim()) as u128;
    let each = |ops: LayerOps, name: &str| -> Option<u128> {
        let o = Options {
            causal: true,
            runtime: Runtime {
                layer_ops: ops,
                ..Runtime::default()
            },
            ..Options::default()
        };
        let w = workload(model.clone(), MethodId::TpSp, p as u64, s as u64, o);
        inventory(&w)
            .unwrap()
            .tensors
            .iter()
            .find(|t| t.name == name)
            .map(|t| t.bytes_each)
    };
    for ops in [LayerOps::Fused, LayerOps::Eager, LayerOps::EagerFusedNorm] {
        let eager = ops != LayerOps::Fused;
        let k_cols = if eager { h } else { kv };
        assert_eq!(
            each(ops, names::ATTN_K),
            Some(2 * s * k_cols / p),
            "{ops:?} K"
        );
        assert_eq!(
            each(ops, names::ATTN_V),
            Some(2 * s * k_cols / p),
            "{ops:?} V"
        );
        let silu = eager.then_some(2 * s * f / p);
        assert_eq!(each(ops, names::MLP_SILU_OUTPUT), silu, "{ops:?} silu");
        // Sequence parallelism: the norms run on s/p tokens.
        let norm = (ops == LayerOps::Eager).then_some(4 * s / p * h);
        assert_eq!(each(ops, names::NORM_LN1_EAGER), norm, "{ops:?} ln1");
        assert_eq!(each(ops, names::NORM_LN2_EAGER), norm, "{ops:?} ln2");
    }
}
