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
