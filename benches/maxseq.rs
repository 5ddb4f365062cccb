//! `maxseq` for 6 methods × 4 degrees on one model — the DESIGN goal is well under 50 ms.

use criterion::{criterion_group, criterion_main, Criterion};
use metp_sim::config::{load_hardware, load_model, MethodId, Options, Workload};
use metp_sim::search::max_seq_grid;

fn bench(c: &mut Criterion) {
    let template = Workload {
        model: load_model("llama2-7b").expect("bundled model"),
        hardware: load_hardware("dgx-a100-80gb").expect("bundled profile"),
        method: MethodId::Metp,
        p: 8,
        dp: 1,
        outer: metp_sim::config::OuterAxes::default(),
        seq: 1,
        micro_batch: 1,
        micro_batches: 1,
        options: Options::default(),
    };
    c.bench_function(
        "maxseq 6 methods x 4 degrees (llama2-7b, dgx-a100-80gb)",
        |b| b.iter(|| max_seq_grid(&template, &MethodId::ALL, &[1, 2, 4, 8])),
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
