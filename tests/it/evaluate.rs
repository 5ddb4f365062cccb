//! The evaluation path: one inventory and one plan per evaluated workload, metrics from one
//! place.

use metp_sim::config::{load_hardware, load_model, MethodId, Options, Workload};
use metp_sim::evaluate::{model_flops, Evaluation, SimulateOptions};
use metp_sim::sim::LinkModel;
use metp_sim::{memory, report, schedule};

fn llama_metp(seq: u64) -> Workload {
    Workload {
        model: load_model("llama2-7b").unwrap(),
        hardware: load_hardware("dgx-a100-80gb").unwrap(),
        method: MethodId::Metp,
        p: 8,
        dp: 1,
        outer: metp_sim::config::OuterAxes::default(),
        seq,
        micro_batch: 1,
        micro_batches: 1,
        options: Options::default(),
    }
}

/// What `metp-sim simulate` does — validate, evaluate, simulate, render table and JSON —
/// builds the memory inventory once and the step plan once (the counters are per thread, and
/// each test runs on its own).
#[test]
fn simulate_builds_the_inventory_and_the_plan_once() {
    let w = llama_metp(32768).validate().unwrap();
    let (inventories, plans) = (memory::inventories_built(), schedule::plans_built());
    let e = Evaluation::new(w)
        .simulate(SimulateOptions::full(LinkModel::MaxMin))
        .unwrap();
    let _ = report::simulate_table(&e);
    let _ = report::simulate_json(&e);
    assert_eq!(memory::inventories_built() - inventories, 1);
    assert_eq!(schedule::plans_built() - plans, 1);
}

/// Throughput and MFU follow from the step time: tokens/s = s·b·m·dp / T and MFU = model FLOPs
/// / (T · peak · p · dp); model FLOPs = 6 · (GEMM parameters) · tokens + 12 · b · s² · h · L
/// (Korthikanti et al. 2022, Appendix A, without recomputation).
#[test]
fn metrics_follow_from_the_step_time() {
    let w = llama_metp(16384).validate().unwrap();
    let e = Evaluation::new(w.clone());
    let m = &e.metrics;
    let t = e.estimate.step_time_s;
    assert_eq!(m.step_time_s, t);
    assert_eq!(m.tokens_per_s, 16384.0 / t);
    let model = &w.model;
    let params = model.layers * (model.attention_params_per_layer() + model.mlp_params_per_layer())
        + model.vocab * model.hidden;
    let flops = 6.0 * params as f64 * 16384.0
        + 12.0 * 16384f64.powi(2) * model.hidden as f64 * model.layers as f64;
    assert_eq!(model_flops(&w), flops);
    let peak = w.hardware.gpu.peak_bf16_flops_per_s.value;
    assert!((m.mfu - flops / (t * peak * 8.0)).abs() < 1e-12);
    assert!(m.mfu > 0.0 && m.mfu < 1.0);
    assert_eq!(m.peak_bytes, e.inventory.peak_bytes);
    assert_eq!(m.headroom_bytes + m.peak_bytes, m.capacity_bytes);
    assert!(m.fits);
}

/// A published TFLOP/s figure is read in its source's FLOP convention: NeMo 2's flops_formulas.py
/// before August 2025 (llama3: h²·(12 + 12·G/H + 18·F/h + 12·s/h + 6·V/(L·h)) per token and
/// layer, every attention score counted) turns NeMo 25.02's B200 Llama 3 8B row, 26,006
/// tokens/s/GPU at 8K, into its published 1,506 TFLOP/s/GPU. The tool's full-count convention
/// gives the same FLOPs per token (so the long-sequence run files read their TFLOP/s right);
/// counting the causal half instead would not (1,423).
#[test]
fn nemo_model_tflops_are_the_full_count_convention() {
    use metp_sim::evaluate::{step_flops, AttentionFlops, FlopConvention};
    let mut w = llama_metp(8192);
    w.model = load_model("llama3-8b").unwrap();
    w.options.causal = true;
    let m = &w.model;
    let (h, l, s) = (m.hidden as f64, m.layers as f64, 8192.0);
    let (g, a, f, v) = (
        m.kv_heads as f64,
        m.heads as f64,
        m.ffn_hidden as f64,
        m.vocab as f64,
    );
    let nemo = l * h * h * (12.0 + 12.0 * g / a + 18.0 * f / h + 12.0 * s / h + 6.0 * v / (l * h));
    assert!(
        (26006.0 * nemo / 1e12 - 1506.0).abs() < 1.0,
        "{}",
        26006.0 * nemo / 1e12
    );
    let per_token = |attention| {
        step_flops(
            &w,
            FlopConvention {
                attention,
                recomputation: false,
            },
        ) / s
    };
    let full = per_token(AttentionFlops::Full);
    assert!((full / nemo - 1.0).abs() < 1e-3, "{full} against {nemo}");
    let causal = 26006.0 * per_token(AttentionFlops::Causal) / 1e12;
    assert!((causal - 1506.0).abs() > 50.0, "{causal}");
}
