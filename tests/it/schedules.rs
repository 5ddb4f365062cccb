//! Every method's lowered task graph is well formed (matched sends and receives, complete
//! collectives, dependencies backwards) for degrees, options and data parallelism.

use metp_sim::config::{load_model, MethodId, Options, Recompute, WeightExchange, ZeroStage};
use metp_sim::schedule::{lower, plan, LowerOptions, Work};

use crate::common::workload;

#[test]
fn lowered_graphs_are_well_formed() {
    let model = {
        let mut m = load_model("llama2-7b").unwrap();
        m.layers = 2;
        m
    };
    for method in MethodId::ALL {
        for p in [1u64, 2, 4, 8] {
            for (causal, flash, rec, buffers, exchange, zero, dp) in [
                (
                    false,
                    true,
                    Recompute::None,
                    2,
                    WeightExchange::Ring,
                    ZeroStage::Zero0,
                    1,
                ),
                (
                    true,
                    false,
                    Recompute::Selective,
                    1,
                    WeightExchange::Broadcast,
                    ZeroStage::Zero1,
                    2,
                ),
                (
                    true,
                    true,
                    Recompute::Full,
                    2,
                    WeightExchange::Broadcast,
                    ZeroStage::Zero3,
                    2,
                ),
            ] {
                let mut o = Options {
                    causal,
                    flash,
                    recompute: rec,
                    zero: Some(zero),
                    ..Options::default()
                };
                o.metp.recv_buffers = buffers;
                o.metp.weight_exchange = exchange;
                let mut w = workload(model.clone(), method, p, 4096, o);
                w.dp = dp;
                w.micro_batches = 2;
                let w = w.validate().unwrap();
                let stages = metp_sim::memory::stage_inventories(&w);
                let plan = plan(&w);
                let g = lower(
                    &w,
                    &plan,
                    &stages,
                    LowerOptions {
                        devices: metp_sim::schedule::Devices::All,
                        memory: true,
                        optimizer: true,
                        rounds: metp_sim::schedule::Rounds::None,
                    },
                );
                g.check()
                    .unwrap_or_else(|e| panic!("{method} p={p} causal={causal}: {e}"));
                assert_eq!(g.devices as u64, p * dp);
                // Memory tasks balance: every device frees what it allocates.
                for dev in 0..g.devices {
                    let net: i128 = g
                        .tasks
                        .iter()
                        .filter(|t| t.device == dev)
                        .map(|t| match t.work {
                            Work::Alloc { bytes, .. } => bytes as i128,
                            Work::Free { bytes, .. } => -(bytes as i128),
                            _ => 0,
                        })
                        .sum();
                    assert_eq!(net, 0, "{method} p={p} device {dev}");
                }
            }
        }
    }
}

/// Bytes of the memory-bound passes named `name` of device 0's first layer that `keep` keeps.
fn layer0_pass_bytes(
    g: &metp_sim::schedule::TaskGraph,
    name: &str,
    keep: impl Fn(&metp_sim::schedule::Task) -> bool,
) -> u64 {
    crate::common::pass_bytes(g, name, |t| t.label.layer == Some(0) && keep(t))
        .iter()
        .sum()
}

/// A rotary model's layer rotates its local queries and keys once forward and rotates their
/// gradients back once (4 bytes per value each way, `schedule::kernels::rope`), whichever
/// method splits them: b·s·(h + kv width)/p values per device for every method and degree,
/// and once more in each forward replayed (full recomputation, METP's recomputed projection). A model without rotary
/// positions (GPT-3) has no such pass.
#[test]
fn rotary_models_rotate_queries_and_keys_once_each_way() {
    use metp_sim::schedule::Pass;
    let seq = 4096u64;
    for (name, rotary) in [("llama3-8b", true), ("gpt3-1.3b", false)] {
        let mut model = load_model(name).unwrap();
        assert_eq!(model.rotary, rotary, "{name}");
        model.layers = 2;
        let (h, kv_width) = (model.hidden, model.kv_heads * model.head_dim());
        for method in MethodId::ALL {
            for p in [1u64, 2, 8] {
                for rec in [Recompute::None, Recompute::Full] {
                    let o = Options {
                        causal: true,
                        recompute: rec,
                        ..Options::default()
                    };
                    let w = workload(model.clone(), method, p, seq, o);
                    let Ok(w) = w.validate() else { continue };
                    let g = crate::common::lowered_step(&w);
                    let bytes = |name: &str, pass: Pass| -> u64 {
                        layer0_pass_bytes(&g, name, |t| t.label.pass == pass)
                    };
                    let label = format!("{name} {method} p={p} {rec:?}");
                    let once = if rotary {
                        4 * seq * (h + kv_width) / p
                    } else {
                        0
                    };
                    // METP recomputes each head group's projection before its backward
                    // unless told to store it (`--metp-store-qkv`), and rotates it again.
                    let metp_recompute = method == MethodId::Metp && !w.options.metp.store_qkv;
                    let replays = 1 + u64::from(rec == Recompute::Full) + u64::from(metp_recompute);
                    let fwd = bytes("rope", Pass::Fwd) + bytes("rope", Pass::Bwd);
                    assert_eq!(fwd, replays * once, "{label}: forward rotations");
                    assert_eq!(bytes("rope-bwd", Pass::Bwd), once, "{label}: backward");
                }
            }
        }
    }
}

/// PyTorch eager layer ops (`--layer-ops eager`, torchtitan's Llama) reach every baseline's
/// every pass, exactly as `schedule::kernels` counts them per element: on device 0's first
/// layer, each norm moves 36 bytes per element forward and 92 backward (plus 8 per row in two
/// kernels forward, three backward) where fused moves 4 and 6; the activation 10 and 18 per
/// MLP column where fused SwiGLU moves 6 and 10; the rotary embedding 20 per query and key
/// value each way where fused moves 4, plus the GQA keys and values copied out to every query
/// head (read kv, write q columns). `eager-fused-norm` leaves the norms as fused. Full
/// recomputation replays the forward's passes. METP refuses eager ops.
#[test]
fn eager_layer_ops_reach_every_pass_of_every_baseline() {
    use metp_sim::config::{LayerOps, Runtime};
    let mut model = load_model("llama3-8b").unwrap();
    model.layers = 2;
    let seq = 4096u64;
    let (h, f) = (model.hidden, model.ffn_hidden);
    let (q, kv) = (model.hidden, model.kv_heads * model.head_dim());
    for method in MethodId::ALL {
        for p in [1u64, 2, 8] {
            for rec in [Recompute::None, Recompute::Full] {
                let mut per = Vec::new();
                for ops in [LayerOps::Fused, LayerOps::Eager, LayerOps::EagerFusedNorm] {
                    let o = Options {
                        causal: true,
                        recompute: rec,
                        runtime: Runtime {
                            layer_ops: ops,
                            ..Runtime::default()
                        },
                        ..Options::default()
                    };
                    let w = workload(model.clone(), method, p, seq, o);
                    let w = match (w.validate(), method, ops) {
                        (Err(e), MethodId::Metp, LayerOps::Eager | LayerOps::EagerFusedNorm) => {
                            assert!(e.to_string().contains("--layer-ops"), "{e}");
                            continue;
                        }
                        (Ok(w), MethodId::Metp, LayerOps::Eager | LayerOps::EagerFusedNorm) => {
                            panic!("METP accepted {ops:?}: {}", w.method)
                        }
                        (Err(_), _, _) => continue,
                        (Ok(w), _, _) => w,
                    };
                    let g = crate::common::lowered_step(&w);
                    let bytes = |name: &str| layer0_pass_bytes(&g, name, |_| true);
                    per.push([
                        bytes("ln1") + bytes("ln2"),
                        bytes("ln1-bwd") + bytes("ln2-bwd"),
                        bytes("act"),
                        bytes("act-bwd"),
                        bytes("rope"),
                        bytes("rope-bwd"),
                    ]);
                }
                if per.len() < 3 {
                    continue;
                }
                let label = format!("{method} p={p} {rec:?}");
                let [fused, eager, fused_norm] = [per[0], per[1], per[2]];
                let replays = 1 + u64::from(rec == Recompute::Full);
                // Norm elements per forward, from the fused pass (4 bytes each), and their rows.
                let n = fused[0] / 4 / replays;
                let rows = n / h;
                assert_eq!(fused[1], 6 * n, "{label}: fused norm backward");
                assert_eq!(
                    eager[0],
                    replays * (36 * n + 16 * rows),
                    "{label}: norm forward"
                );
                assert_eq!(eager[1], 92 * n + 24 * rows, "{label}: norm backward");
                assert_eq!(
                    fused_norm[0..2],
                    fused[0..2],
                    "{label}: eager-fused-norm norms"
                );
                // The activation over b·s·f/p values per device, whichever method splits them.
                let e_f = seq * f / p;
                assert_eq!(fused[2], replays * 6 * e_f, "{label}: fused act");
                assert_eq!(fused[3], 10 * e_f, "{label}: fused act-bwd");
                for e in [eager, fused_norm] {
                    assert_eq!(e[2], replays * 10 * e_f, "{label}: eager act");
                    assert_eq!(e[3], 18 * e_f, "{label}: eager act-bwd");
                    // RoPE over b·s·(q + kv)/p values, and the K/V expansion the same count.
                    let e_qk = seq * (q + kv) / p;
                    assert_eq!(e[4], replays * 24 * e_qk, "{label}: eager rope");
                    assert_eq!(e[5], 24 * e_qk, "{label}: eager rope-bwd");
                }
                assert_eq!(fused[5], 4 * seq * (q + kv) / p, "{label}: fused rope-bwd");
            }
        }
    }
}

/// The lowered step of `w` on every device, without memory or optimizer tasks.
fn step_graph(w: metp_sim::config::Workload) -> metp_sim::schedule::TaskGraph {
    let w = w.validate().unwrap();
    let stages = metp_sim::memory::stage_inventories(&w);
    lower(
        &w,
        &plan(&w),
        &stages,
        LowerOptions {
            devices: metp_sim::schedule::Devices::All,
            memory: false,
            optimizer: false,
            rounds: metp_sim::schedule::Rounds::None,
        },
    )
}

/// A double-buffered ring posts hop k's send together with its receive, at the start of step
/// k (as a ring's loop issues both — Transformer Engine's context-parallel attention does), not
/// as soon as hop k − 1 has landed: each send after the first waits for the sending device's
/// own step k − 1 (a kernel of that ring step among its dependencies). Posted earlier, the send
/// would sit on its stream waiting on a neighbour still computing step k − 1.
#[test]
fn ring_sends_are_posted_with_their_step() {
    let mut model = load_model("llama2-7b").unwrap();
    model.layers = 1;
    let o = Options {
        causal: true,
        ..Options::default()
    };
    let g = step_graph(workload(model, MethodId::Ring, 4, 4096, o));
    g.check().unwrap();
    let mut checked = 0;
    for t in &g.tasks {
        let Some(k) = t.label.step.filter(|&k| k > 0) else {
            continue;
        };
        if t.label.name != "prefetch-send" {
            continue;
        }
        let after_previous_step = t.deps.iter().any(|&d| {
            let dep = &g.tasks[d as usize];
            dep.device == t.device
                && matches!(dep.work, Work::Compute { .. })
                && dep.label.step == Some(k - 1)
        });
        assert!(
            after_previous_step,
            "{:?} is posted before step {}",
            t.label,
            k - 1
        );
        checked += 1;
    }
    // Forward and backward rings of 4 devices: 2 later sends each, on each device.
    assert!(checked >= 16, "{checked} sends checked");
}

/// The loss's cross-entropy moves the bytes per logit of the software that ran it
/// (`config::runtime::CrossEntropy`): one kernel each way 8, Megatron-Core's jit-fused 44,
/// Megatron's op-by-op 52 — over the b·s·V/p logits a tp-sp device holds (vocabulary split
/// over the p devices); the step grows in that order.
#[test]
fn cross_entropy_moves_the_bytes_of_the_software_that_ran_it() {
    use metp_sim::config::CrossEntropy;
    let model = load_model("llama3-8b").unwrap();
    let (p, s) = (2u64, 4096u64);
    let logits = (s * model.vocab / p) as f64;
    let mut steps = Vec::new();
    for (ce, per_logit) in [
        (CrossEntropy::SingleKernel, 8.0),
        (CrossEntropy::MegatronJit, 44.0),
        (CrossEntropy::MegatronUnfused, 52.0),
    ] {
        let mut o = Options {
            causal: true,
            ..Options::default()
        };
        o.runtime.cross_entropy = ce;
        let w = workload(model.clone(), MethodId::TpSp, p, s, o);
        let g = step_graph(w.clone());
        let bytes: u64 = crate::common::pass_bytes(&g, "cross-entropy", |_| true)
            .iter()
            .sum();
        assert!(
            (bytes as f64 / (per_logit * logits) - 1.0).abs() < 1e-6,
            "{}: {bytes} bytes for {logits} logits",
            ce.id()
        );
        let w = w.validate().unwrap();
        steps.push(metp_sim::evaluate::Evaluation::new(w).estimate.step_time_s);
    }
    assert!(steps[0] < steps[1] && steps[1] < steps[2], "{steps:?}");
}
