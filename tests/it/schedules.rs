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

/// A rotary model's layer rotates its local queries and keys once forward and rotates their
/// gradients back once (4 bytes per value each way, `schedule::kernels::rope`), whichever
/// method splits them: b·s·(h + kv width)/p values per device for every method and degree,
/// and once more in each forward replayed (full recomputation, METP's recomputed projection). A model without rotary
/// positions (GPT-3) has no such pass.
#[test]
fn rotary_models_rotate_queries_and_keys_once_each_way() {
    use metp_sim::schedule::{KernelShape, Pass};
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
                        g.tasks
                            .iter()
                            .filter(|t| {
                                t.device == 0
                                    && t.label.name == name
                                    && t.label.pass == pass
                                    && t.label.layer == Some(0)
                            })
                            .map(|t| match t.work {
                                Work::Compute { kernel } => match g.kernels[kernel as usize] {
                                    KernelShape::Elementwise { bytes } => bytes,
                                    _ => panic!("{name}: not a memory-bound pass"),
                                },
                                _ => panic!("{name}: not a kernel"),
                            })
                            .sum()
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
