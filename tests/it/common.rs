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
