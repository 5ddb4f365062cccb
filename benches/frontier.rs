//! Planning and simulating at frontier scale (issue 19's table; README "Performance"): one
//! fast-path simulation of LLaMA 3 405B's 16,384-GPU layout at 128k (TP 8, CP 16, PP 16, V 4,
//! DP 8), Korthikanti's 1T step (PP 64, 512 GPUs, full recomputation) on the fast path and
//! exactly, the default sweep, and the two plans (405B on 16,384 H100 at 128k, GPT-3 175B on
//! 1,024 A100), and a ZeRO-3 ring layout of the first at 8 and 64 replicas (the same cost). The
//! plans and the ring pair take seconds to minutes an iteration on two cores (release):
//! run them alone (`cargo bench --bench frontier -- plan`) when you mean to; `cargo test` skips
//! them.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use metp_sim::config::{
    load_hardware, load_model, AttentionKernel, MethodId, Options, OuterAxes, Recompute, Workload,
};
use metp_sim::evaluate::{Devices, Evaluation, SimDepth, SimulateOptions, Timing};
use metp_sim::plan::{plan, PlanSpec};
use metp_sim::sim::{LinkModel, TraceScope};
use metp_sim::sweep::{run, SweepSpec};

fn fast(depth: SimDepth) -> SimulateOptions {
    SimulateOptions {
        link: LinkModel::MaxMin,
        depth,
        trace: TraceScope::Off,
        devices: Devices::Distinct,
    }
}

fn simulations(c: &mut Criterion) {
    let mut hw = load_hardware("dgx-h100").expect("bundled profile");
    hw.nodes = 2048;
    let llama3 = Workload {
        model: load_model("llama3-405b").expect("bundled model"),
        hardware: hw,
        method: MethodId::TpSp,
        p: 8,
        dp: 8,
        outer: OuterAxes {
            pp: 16,
            interleave: 4,
            cp: 16,
        },
        seq: 128 * 1024,
        micro_batch: 1,
        micro_batches: 16,
        options: Options {
            causal: true,
            ..Options::default()
        },
    }
    .validate()
    .expect("valid workload");
    let mut a100 = load_hardware("dgx-a100-80gb").expect("bundled profile");
    a100.nodes = 64;
    let one_t = Workload {
        model: load_model("korthikanti-1t").expect("bundled model"),
        hardware: a100,
        method: MethodId::Tp,
        p: 8,
        dp: 1,
        outer: OuterAxes {
            pp: 64,
            interleave: 1,
            cp: 1,
        },
        seq: 2048,
        micro_batch: 1,
        micro_batches: 512,
        options: Options {
            causal: true,
            flash: false,
            attention: Some(AttentionKernel::Unfused),
            recompute: Recompute::Full,
            ..Options::default()
        },
    }
    .validate()
    .expect("valid workload");
    let mut g = c.benchmark_group("frontier-simulate");
    g.sample_size(10).measurement_time(Duration::from_secs(2));
    g.bench_function(
        "llama3-405b 16384 gpus 128k tp8 cp16 pp16 v4 dp8 (fast path)",
        |b| {
            b.iter(|| {
                Evaluation::new(llama3.clone())
                    .simulate(fast(SimDepth::Extrapolate))
                    .expect("simulates")
            })
        },
    );
    g.bench_function("korthikanti 1t pp64 512 gpus (fast path)", |b| {
        b.iter(|| {
            Evaluation::new(one_t.clone())
                .simulate(fast(SimDepth::Extrapolate))
                .expect("simulates")
        })
    });
    g.bench_function("korthikanti 1t pp64 512 gpus (exact, periodic)", |b| {
        b.iter(|| {
            Evaluation::new(one_t.clone())
                .simulate(fast(SimDepth::Periodic))
                .expect("simulates")
        })
    });
    // `sweep`'s defaults: llama2-7b on dgx-a100-80gb, every method, degrees 1-8, 4k-512k.
    let spec = SweepSpec {
        models: vec![load_model("llama2-7b").expect("bundled model")],
        hardware: vec![load_hardware("dgx-a100-80gb").expect("bundled profile")],
        methods: MethodId::ALL.to_vec(),
        degrees: vec![1, 2, 4, 8],
        seqs: (0..8).map(|i| 4096u64 << i).collect(),
        outer: vec![Default::default()],
        micro_batch: 1,
        micro_batches: None,
        options: Options::default(),
        timing: Timing::Simulated(LinkModel::MaxMin),
    };
    g.bench_function("default sweep 4k..512k (no plots)", |b| {
        b.iter(|| run(&spec, &|_| {}))
    });
    g.finish();
}

fn plans(c: &mut Criterion) {
    let mut llama3 = PlanSpec::new(
        load_model("llama3-405b").expect("bundled model"),
        load_hardware("dgx-h100").expect("bundled profile"),
        16384,
        128 * 1024,
    );
    llama3.global_batch = Some(128);
    llama3.options.causal = true;
    let mut gpt3 = PlanSpec::new(
        load_model("gpt3-175b").expect("bundled model"),
        load_hardware("dgx-a100-80gb").expect("bundled profile"),
        1024,
        2048,
    );
    gpt3.global_batch = Some(1536);
    let mut g = c.benchmark_group("plan");
    g.sample_size(10).measurement_time(Duration::from_secs(1));
    g.bench_function("llama3-405b dgx-h100 16384 gpus 128k gb128", |b| {
        b.iter(|| plan(&llama3).expect("plan"))
    });
    g.bench_function("gpt3-175b dgx-a100-80gb 1024 gpus 2k gb1536", |b| {
        b.iter(|| plan(&gpt3).expect("plan"))
    });
    g.finish();
    // What cost `plan --methods ring` most: a 128-device causal ring under ZeRO-3 whose weights
    // are gathered over its replicas. Its cost should not follow the data-parallel degree
    // (the simulator runs a collective's alike steps as at most `sim::network::COLLECTIVE_STEPS`).
    let ring = |dp: u64| {
        let mut hw = load_hardware("dgx-h100").expect("bundled profile");
        hw.nodes = 32 * dp;
        Workload {
            model: load_model("llama3-405b").expect("bundled model"),
            hardware: hw,
            method: MethodId::Ring,
            p: 128,
            dp,
            outer: OuterAxes {
                pp: 2,
                interleave: 9,
                cp: 1,
            },
            seq: 128 * 1024,
            micro_batch: 1,
            micro_batches: 2,
            options: Options {
                causal: true,
                recompute: Recompute::Full,
                zero: Some(metp_sim::config::ZeroStage::Zero3),
                ..Options::default()
            },
        }
        .validate()
        .expect("valid workload")
    };
    let mut g = c.benchmark_group("ring-zero3-replicas");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    for dp in [8, 64] {
        let w = ring(dp);
        g.bench_function(
            format!("llama3-405b ring p128 pp2 v9 zero3 dp{dp} (fast path)"),
            |b| {
                b.iter(|| {
                    Evaluation::new(w.clone())
                        .simulate(fast(SimDepth::Extrapolate))
                        .expect("simulates")
                })
            },
        );
    }
    g.finish();
}

/// The plans only under `cargo bench` (criterion is given `--bench`): `cargo test
/// --all-targets` runs every bench once, and a debug build would take many minutes on them.
fn plans_when_benching(c: &mut Criterion) {
    if std::env::args().any(|a| a == "--bench") {
        plans(c);
    }
}

criterion_group!(benches, simulations, plans_when_benching);
criterion_main!(benches);
