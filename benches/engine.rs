//! Simulator throughput: events per second on large synthetic graphs.
//!
//! - `compute_chain`: 8 devices, each a long chain of kernels on its compute stream, with a
//!   ring send/recv every 64 kernels (compute-dominated; almost one event per task).
//! - `metp_like`: the shape of one METP step of a 7B model on 8 GPUs: 32 layers × 8 outer ×
//!   8 inner ring steps per device, each step a double-buffered kernel + send + recv + alloc,
//!   free and a merge kernel (≈ 6 tasks), under max-min sharing.
//!
//! Run: `cargo bench --bench engine`. Criterion reports throughput in events (elements) per
//! second; the task and event counts are printed once at the start.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use metp_sim::config::{load_hardware, Hardware};
use metp_sim::schedule::{
    Attention, AttnPass, KernelShape, Label, Pass, Stream, TaskGraph, TaskId, Work,
};
use metp_sim::sim::{simulate, LinkModel, SimOptions};

fn label(name: &'static str, layer: u32, outer: u32, step: u32) -> Label {
    Label {
        pass: Pass::Fwd,
        layer: Some(layer),
        block: "attention",
        name,
        outer: Some(outer),
        step: Some(step),
        micro_batch: 0,
    }
}

fn compute_chain(devices: u32, per_device: u32) -> TaskGraph {
    let mut g = TaskGraph::new(devices);
    // A 4e10-FLOP GEMM.
    let gemm = g.add_kernel(KernelShape::gemm(2048, 2048, 4768));
    let mut tag = 0u64;
    for i in 0..per_device {
        for d in 0..devices {
            g.add(
                d,
                Stream::Compute,
                Work::Compute { kernel: gemm },
                vec![],
                label("gemm", 0, 0, i),
            );
        }
        if i % 64 == 63 {
            for d in 0..devices {
                let to = (d + 1) % devices;
                g.add(
                    d,
                    Stream::Comm(0),
                    Work::Send {
                        to,
                        bytes: 1 << 20,
                        tag,
                    },
                    vec![],
                    label("s", 0, 0, i),
                );
                let from = (d + devices - 1) % devices;
                g.add(
                    d,
                    Stream::Comm(1),
                    Work::Recv {
                        from,
                        bytes: 1 << 20,
                        tag,
                    },
                    vec![],
                    label("r", 0, 0, i),
                );
            }
            tag += 1;
        }
    }
    g
}

/// Ring send/recv of `tag` from every device to its successor, double-buffered against the
/// compute stream (see the engine's double-buffer test for the dependency pattern).
fn metp_like(devices: u32, layers: u32, outer: u32, inner: u32) -> TaskGraph {
    let mut g = TaskGraph::new(devices);
    // A 4-head attention block of 7k tokens (≈ 1e11 FLOPs) and a 30 MB merge.
    let attn = g.add_kernel(KernelShape::Attention(Attention {
        batch: 1,
        heads: 4,
        kv_heads: 4,
        q_tokens: 7424,
        kv_tokens: 7424,
        head_dim: 128,
        causal: false,
        pass: AttnPass::Fwd,
    }));
    let merge = g.add_kernel(KernelShape::Elementwise { bytes: 30_000_000 });
    let mut tag = 0u64;
    let n = devices as usize;
    let mut prev_comp: Vec<Option<TaskId>> = vec![None; n];
    for layer in 0..layers {
        for o in 0..outer {
            let mut prev_recv: Vec<Option<TaskId>> = vec![None; n];
            for k in 0..inner {
                let mut recvs = vec![None; n];
                for d in 0..devices {
                    let di = d as usize;
                    let lab = |name| label(name, layer, o, k);
                    let deps: Vec<TaskId> = prev_recv[di].into_iter().collect();
                    let a = g.add(
                        d,
                        Stream::Compute,
                        Work::Alloc {
                            bytes: 64 << 20,
                            tensor: "scores",
                        },
                        vec![],
                        lab("alloc"),
                    );
                    let mut cdeps = deps.clone();
                    cdeps.push(a);
                    let c = g.add(
                        d,
                        Stream::Compute,
                        Work::Compute { kernel: attn },
                        cdeps,
                        lab("attn-block"),
                    );
                    g.add(
                        d,
                        Stream::Compute,
                        Work::Compute { kernel: merge },
                        vec![],
                        lab("lse-merge"),
                    );
                    g.add(
                        d,
                        Stream::Compute,
                        Work::Free {
                            bytes: 64 << 20,
                            tensor: "scores",
                        },
                        vec![],
                        lab("free"),
                    );
                    if k + 1 < inner {
                        let to = (d + 1) % devices;
                        let from = (d + devices - 1) % devices;
                        g.add(
                            d,
                            Stream::Comm(0),
                            Work::Send {
                                to,
                                bytes: 32 << 20,
                                tag,
                            },
                            deps,
                            lab("kv-send"),
                        );
                        let rdeps: Vec<TaskId> = prev_comp[di].into_iter().collect();
                        recvs[di] = Some(g.add(
                            d,
                            Stream::Comm(1),
                            Work::Recv {
                                from,
                                bytes: 32 << 20,
                                tag,
                            },
                            rdeps,
                            lab("kv-recv"),
                        ));
                    }
                    prev_comp[di] = Some(c);
                }
                tag += 1;
                prev_recv = recvs;
            }
        }
    }
    g
}

fn bench(c: &mut Criterion) {
    let hw: Hardware = load_hardware("dgx-a100-80gb").expect("profile");
    let cases = [
        ("compute_chain", compute_chain(8, 25_000), LinkModel::MaxMin),
        ("metp_like", metp_like(8, 32, 8, 8), LinkModel::MaxMin),
        ("metp_like_ideal", metp_like(8, 32, 8, 8), LinkModel::Ideal),
    ];
    let mut group = c.benchmark_group("engine");
    group.sample_size(10);
    for (name, g, model) in &cases {
        let r = simulate(g, &hw, *model, SimOptions::default()).expect("simulates");
        eprintln!(
            "{name}: {} tasks, {} events, step {:.3} ms",
            g.tasks.len(),
            r.events,
            r.step_time_s * 1e3
        );
        group.throughput(Throughput::Elements(r.events));
        group.bench_with_input(BenchmarkId::from_parameter(name), g, |b, g| {
            b.iter(|| simulate(g, &hw, *model, SimOptions::default()).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
