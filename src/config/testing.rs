//! Workloads the crate's unit tests build again and again (tests only): TP + SP at p = 8 on
//! GPT-3 1.3B over DGX-A100 nodes, sequence 2048, one sequence per micro-batch, with the
//! outer axes, the layer count and the options a test varies. Depends on `config` only.

use super::{load_hardware, load_model, MethodId, Options, OuterAxes, ValidWorkload, Workload};

/// TP + SP, p = 8, on GPT-3 1.3B with `layers` layers, over `nodes` DGX-A100 nodes: pipeline
/// `pp` × `v` virtual stages, `dp` replicas, `m` micro-batches of one sequence of 2048.
pub(crate) fn gpt3_tp_sp(
    layers: u64,
    (pp, v, dp): (u64, u64, u64),
    m: u64,
    nodes: u64,
    options: Options,
) -> ValidWorkload {
    let mut model = load_model("gpt3-1.3b").unwrap();
    model.layers = layers;
    let mut hardware = load_hardware("dgx-a100-80gb").unwrap();
    hardware.nodes = nodes;
    Workload {
        model,
        hardware,
        method: MethodId::TpSp,
        p: 8,
        dp,
        outer: OuterAxes {
            pp,
            interleave: v,
            cp: 1,
        },
        seq: 2048,
        micro_batch: 1,
        micro_batches: m,
        options,
    }
    .validate()
    .unwrap()
}
