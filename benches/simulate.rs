//! Simulator throughput on the workloads the README quotes: one METP step of LLaMA-2 7B at 128k
//! tokens on 8 GPUs through the evaluation path — inventory, plan, closed-form estimate,
//! lowering and max-min simulation (goal: under 100 ms), and the default sweep's 192 points (6 methods × 4
//! degrees × 8 lengths, event-driven; goal: the whole `sweep` command under 5 s on 2 cores).

use criterion::{criterion_group, criterion_main, Criterion};
use metp_sim::config::{load_hardware, load_model, MethodId, Options, Workload};
use metp_sim::evaluate::{Evaluation, SimulateOptions, Timing};
use metp_sim::sim::LinkModel;
use metp_sim::sweep::{run, SweepSpec};

fn bench(c: &mut Criterion) {
    let model = load_model("llama2-7b").expect("bundled model");
    let hardware = load_hardware("dgx-a100-80gb").expect("bundled profile");
    let w = Workload {
        model: model.clone(),
        hardware: hardware.clone(),
        method: MethodId::Metp,
        p: 8,
        dp: 1,
        outer: metp_sim::config::OuterAxes::default(),
        seq: 131072,
        micro_batch: 1,
        micro_batches: 1,
        options: Options::default(),
    }
    .validate()
    .expect("valid workload");
    let mut g = c.benchmark_group("simulate");
    g.sample_size(10);
    g.bench_function("metp step llama2-7b 128k 8 gpus (maxmin)", |b| {
        b.iter(|| {
            Evaluation::new(w.clone())
                .simulate(SimulateOptions::full(LinkModel::MaxMin))
                .expect("simulates")
        })
    });
    let spec = SweepSpec {
        models: vec![model],
        hardware: vec![hardware],
        methods: MethodId::ALL.to_vec(),
        degrees: vec![1, 2, 4, 8],
        seqs: (0..8).map(|i| 4096u64 << i).collect(),
        outer: vec![Default::default()],
        micro_batch: 1,
        micro_batches: None,
        options: Options::default(),
        timing: Timing::Simulated(LinkModel::MaxMin),
    };
    g.bench_function("sweep 6 methods x 4 degrees x 8 lengths (llama2-7b)", |b| {
        b.iter(|| run(&spec, &|_| {}))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
