//! Inputs: model files, hardware profiles, and the workload a command runs.
//!
//! Reads `models/*.json` and `hardware-profiles/*.json` (strict schemas, every number checked,
//! errors name the file and field), parses command-line quantities such as `4k` and `4k..512k`,
//! and assembles a validated [`Workload`]. Depends only on `error` and `inputs` (every file read is noted there); never on `memory`,
//! `schedule` or `sim`: nothing here knows about memory, schedules or the simulator.
//!
//! One concept per file; the files use each other in one direction
//! (`tests/it/layering_files.rs`): [`Figure`] (a number with its source) and the training
//! options have their own files, so that the hardware profile and its kernel model, and the
//! methods' rules and the workload, do not use each other both ways.

mod attention;
mod dims;
mod figure;
mod files;
pub mod fleet;
mod groups;
mod hardware;
mod hardware_check;
mod hf;
mod kernel_model;
mod layout;
mod library;
pub mod limits;
mod method;
mod model;
mod options;
mod precision;
mod runtime;
mod scale;
mod seq;
#[cfg(test)]
pub(crate) mod testing;
mod topology;
mod unit;
mod workload;

pub use attention::{parse_attention_kernel, AttentionImpl, AttentionKernel, AttentionSet};
pub use dims::{Dims, Size};
pub use figure::Figure;
pub use files::{
    data_dir, list_names, load_hardware, load_model, parse_json, read_json, read_text,
    read_text_capped, resolve, DataKind,
};
pub use hardware::{Gpu, Hardware, InterNode, InterNodeKind, IntraNode, IntraNodeKind, Reserved};
pub use hf::{from_hf_config, is_hf_config, FAMILIES as HF_FAMILIES};
pub use kernel_model::{
    AttentionModel, AttentionTiles, Fp8GemmModel, GemmModel, HostModel, KernelModel, MemoryModel,
};
pub use layout::{
    flexible_op, flexible_order, pipeline_op, pipeline_order, steady_rounds, virtual_stage_layers,
    Axes, Coord, OuterAxes, PipeOp, SteadyRounds,
};
pub use library::{CollectiveLibrary, Nvls, P2pChannels, Protocol, ProtocolFigures, Protocols};
pub use method::MethodId;
pub use model::{Activation, LinearBiases, Model, Norm};
pub use options::{MetpOptions, Options, Recompute, WeightExchange, ZeroStage};
pub use precision::{GradAccumulation, GradDtype, LinearDtype, OptimizerDtype, OptimizerState};
pub use runtime::{
    CpComm, CrossEntropy, GradBuffer, GradSync, LayerOps, ParamGather, PipeP2p, Runtime, Shown,
    Zero3Gather,
};
pub use scale::{apply_scales, parse_scales, Scale, ALIASES as SCALE_ALIASES};
pub use seq::{parse_amount, parse_count, parse_list, parse_seq_spec};
pub use topology::{
    choose_algorithm, tree_runs, Algorithm, CollectiveKind, CollectiveRule, Scope, Spine, Wiring,
};
pub use unit::{ExecMethod, Unit, UnitShape, UnitSpec, UnitSupport};
pub use workload::{ValidWorkload, Workload};
