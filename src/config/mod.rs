//! Inputs: model files, hardware profiles, and the workload a command runs.
//!
//! Reads `models/*.json` and `hardware-profiles/*.json` (strict schemas, every number checked,
//! errors name the file and field), parses command-line quantities such as `4k` and `4k..512k`,
//! and assembles a validated [`Workload`]. Depends only on `error`; nothing here knows about
//! memory, schedules or the simulator.

mod files;
mod hardware;
mod model;
mod seq;
mod workload;

pub use files::{data_dir, list_names, load_hardware, load_model, read_json, resolve, DataKind};
pub use hardware::{
    AttentionModel, Figure, GemmModel, Gpu, Hardware, HostModel, InterNode, InterNodeKind,
    IntraNode, IntraNodeKind, KernelModel, MemoryModel, Reserved,
};
pub use model::{Activation, Model, Norm};
pub use seq::{parse_count, parse_list, parse_seq_spec};
pub use workload::{
    MethodId, MetpOptions, Options, Recompute, WeightExchange, Workload, ZeroStage,
};
