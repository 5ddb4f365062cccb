//! Fixtures shared by the integration tests.

use metp_sim::config::{load_hardware, Activation, MethodId, Model, Norm, Options, Workload};
use metp_sim::memory::Inventory;

/// A GPT layer as Korthikanti et al. configure it: GeLU, LayerNorm, dropout, f = 4h, MHA.
pub fn gpt(h: u64, a: u64, layers: u64) -> Model {
    Model {
        name: format!("gpt-h{h}-a{a}"),
        layers,
        hidden: h,
        heads: a,
        kv_heads: a,
        ffn_hidden: 4 * h,
        vocab: 51200,
        activation: Activation::Gelu,
        norm: Norm::Layernorm,
        dropout: true,
        tied_embeddings: true,
        biases: Default::default(),
        sliding_window: None,
        rotary: false,
        source: "test fixture".into(),
    }
}

/// A workload on a large synthetic node (so device counts never limit a test).
pub fn workload(model: Model, method: MethodId, p: u64, seq: u64, options: Options) -> Workload {
    let mut hardware = load_hardware("dgx-a100-80gb").expect("bundled profile loads");
    hardware.nodes = 64;
    Workload {
        model,
        hardware,
        method,
        p,
        dp: 1,
        outer: metp_sim::config::OuterAxes::default(),
        seq,
        micro_batch: 1,
        micro_batches: 1,
        options,
    }
}

/// Options with flash off (Korthikanti's setting) and the rest default.
pub fn no_flash() -> Options {
    Options {
        flash: false,
        ..Options::default()
    }
}

/// The memory inventory of `w`, validated first (an invalid workload is the error).
pub fn inventory(w: &Workload) -> metp_sim::Result<Inventory> {
    Ok(metp_sim::memory::inventory(&w.clone().validate()?))
}

/// `w` simulated whole on ideal links: its step time within 1% of the analytic twin's and the
/// engine's alloc/free high-water mark equal to the inventory's peak (for a pipeline, the
/// critical stage's), byte for byte. Returns the evaluation for further checks.
pub fn agrees_with_the_analytic_twin(w: &Workload, label: &str) -> metp_sim::evaluate::Evaluation {
    use metp_sim::evaluate::{Evaluation, SimulateOptions};
    use metp_sim::sim::LinkModel;
    let e = Evaluation::new(w.clone().validate().unwrap())
        .simulate(SimulateOptions::full(LinkModel::Ideal))
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    let (sim, est) = (e.metrics.step_time_s, e.estimate.step_time_s);
    let rel = sim / est - 1.0;
    assert!(
        rel.abs() < 0.01,
        "{label}: simulated {sim:.6} s vs analytic {est:.6} s ({:+.2}%)",
        100.0 * rel
    );
    let run = e
        .simulation
        .as_ref()
        .and_then(|s| s.run.as_ref())
        .expect("simulated whole");
    assert_eq!(
        run.result.max_memory_high_water_bytes(),
        e.inventory.peak_bytes,
        "{label}: the engine's alloc/free high-water vs the inventory's peak"
    );
    e
}

/// A validated workload's step lowered for every device, without memory or optimizer tasks:
/// the compute and communication tasks a test counts.
pub fn lowered_step(w: &metp_sim::config::ValidWorkload) -> metp_sim::schedule::TaskGraph {
    use metp_sim::schedule::{lower, plan, Devices, LowerOptions, Rounds};
    let stages = metp_sim::memory::stage_inventories(w);
    lower(
        w,
        &plan(w),
        &stages,
        LowerOptions {
            devices: Devices::All,
            memory: false,
            optimizer: false,
            rounds: Rounds::None,
        },
    )
}

/// `metp-sim ARGS` run from the repository root, which must succeed, its standard output
/// parsed as JSON (commands given `--format json`).
pub fn cli_json<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> serde_json::Value {
    let out = assert_cmd::Command::cargo_bin("metp-sim")
        .unwrap()
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Bytes of each memory-bound pass named `name` that device 0 runs in `g` and `keep` keeps, in
/// task order (panics if such a task is not a memory-bound kernel).
pub fn pass_bytes(
    g: &metp_sim::schedule::TaskGraph,
    name: &str,
    keep: impl Fn(&metp_sim::schedule::Task) -> bool,
) -> Vec<u64> {
    use metp_sim::schedule::{KernelShape, Work};
    g.tasks
        .iter()
        .filter(|t| t.device == 0 && t.label.name == name && keep(t))
        .map(|t| match t.work {
            Work::Compute { kernel } => match g.kernels[kernel as usize] {
                KernelShape::Elementwise { bytes } => bytes,
                _ => panic!("{name}: not a memory-bound pass"),
            },
            _ => panic!("{name}: not a kernel"),
        })
        .collect()
}
