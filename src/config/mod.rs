//! Inputs: model files, hardware profiles, and the workload a command runs.
//!
//! Reads `models/*.json` and `hardware-profiles/*.json` (strict schemas, every number checked,
//! errors name the file and field), parses command-line quantities such as `4k` and `4k..512k`,
//! and assembles a validated [`Workload`]. Depends only on `error` and `inputs` (every file read is noted there); nothing here knows about
//! memory, schedules or the simulator.

mod attention;
mod dims;
mod files;
mod hardware;
mod hf;
mod kernel_model;
mod layout;
pub mod limits;
mod method;
mod model;
mod scale;
mod seq;
mod topology;
mod unit;
mod workload;

pub use attention::{parse_attention_kernel, AttentionImpl, AttentionKernel, AttentionSet};
pub use dims::{Dims, Size};
pub use files::{
    data_dir, list_names, load_hardware, load_model, parse_json, read_json, read_text,
    read_text_capped, resolve, DataKind,
};
pub use hardware::{
    Figure, Gpu, Hardware, InterNode, InterNodeKind, IntraNode, IntraNodeKind, Reserved,
};
pub use hf::{from_hf_config, is_hf_config, FAMILIES as HF_FAMILIES};
pub use kernel_model::{
    AttentionModel, AttentionTiles, GemmModel, HostModel, KernelModel, MemoryModel,
};
pub use layout::{pipeline_order, virtual_stage_layers, Axes, Coord, OuterAxes, PipeOp};
pub use method::MethodId;
pub use model::{Activation, Model, Norm};
pub use scale::{apply_scales, parse_scales, Scale, ALIASES as SCALE_ALIASES};
pub use seq::{parse_count, parse_list, parse_seq_spec};
pub use topology::{
    choose_algorithm, tree_runs, Algorithm, CollectiveKind, CollectiveRule, Scope, Spine, Wiring,
};
pub use unit::{ExecMethod, Unit, UnitShape, UnitSpec, UnitSupport};
pub use workload::{
    MetpOptions, Options, Recompute, ValidWorkload, WeightExchange, Workload, ZeroStage,
};
