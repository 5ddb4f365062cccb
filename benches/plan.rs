//! `plan` at cluster scale: LLaMA-2 70B at 128k tokens on 1,024 and 4,096 H100s over every
//! axis (issue 13's targets: under 10 s and 30 s on a 2-core machine). Also a reduced step:
//! one symmetric simulation standing for 1,024 GPUs.

use criterion::{criterion_group, criterion_main, Criterion};
use metp_sim::config::{load_hardware, load_model};
use metp_sim::plan::{plan, PlanSpec};

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("plan");
    g.sample_size(10);
    for gpus in [1024u64, 4096] {
        let spec = PlanSpec::new(
            load_model("llama2-70b").expect("bundled model"),
            load_hardware("dgx-h100").expect("bundled profile"),
            gpus,
            128 * 1024,
        );
        g.bench_function(format!("llama2-70b dgx-h100 {gpus} GPUs 128k"), |b| {
            b.iter(|| plan(&spec).expect("plan"))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
