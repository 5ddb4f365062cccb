//! metp-sim: how long a sequence fits, how fast a step runs, and where memory and time go, for
//! METP (memory-efficient tensor parallelism) and the methods it competes with.
//!
//! Data flows one way (DESIGN §3; `tests/it/layering.rs` checks every edge, and
//! `tests/it/layering_docs.rs` the README's layout table against it):
//!
//! - [`error`]: the crate's one error type and exit codes;
//! - [`inputs`]: the files this process has read, so that no output replaces one;
//! - [`atomic`]: output files written atomically (never over an input), and their JSON form;
//! - [`config`]: model and hardware files, command-line quantities, the [`config::Workload`]
//!   and its validated form, the methods' partition rules, one METP unit's description;
//! - [`memory`]: per-device tensor inventories of every method, the METP unit inventory moment
//!   by moment, the tensor names;
//! - [`search`]: the longest sequence that fits;
//! - [`schedule`]: each method's step plan and its lowering to a task graph;
//! - [`cost`]: kernel and message durations from a hardware profile;
//! - [`analytic`]: the closed-form step time and overlap thresholds;
//! - [`sim`]: the discrete-event simulator;
//! - [`evaluate`]: one workload evaluated once — inventory, plan, estimate, simulation and
//!   metrics (tokens/s, MFU, overlap, fits);
//! - [`backend`]: the machines units run on and calibrations measure — the `Backend` trait and
//!   its CPU, CUDA (feature `cuda`) and mock implementations side by side, a unit run on any of
//!   them, a unit's predicted time;
//! - [`fitting`]: the kernel measurement file, the one fit of a profile's kernel model to it,
//!   kernels priced against measured times;
//! - [`calibrate`]: measuring a backend through a plan, fitting and writing hardware profiles,
//!   units predicted against measured;
//! - [`nccl_tests`]: nccl-tests' table predicted on a profile, published logs read and
//!   compared, link figures fitted to them;
//! - [`shard`]: `--shard K/N`, the file each part of a split study writes, and the checks
//!   before `merge` joins the parts;
//! - [`sweep`], [`validate`], [`plan`]: every method × degree × length; the published claims
//!   C1–C4; the configurations that fit N GPUs;
//! - [`runs`]: published training runs (`runs/*.json`) predicted and compared with what their
//!   papers measured;
//! - [`plot`]: SVG/PNG charts and timelines;
//! - [`report`]: tables, CSV and JSON from columns declared once per result, Markdown;
//! - [`cli`]: the thin command-line layer (clap), which nothing depends on.
#![warn(missing_docs)]

pub mod analytic;
pub mod atomic;
pub mod backend;
pub mod calibrate;
pub mod cli;
pub mod config;
pub mod cost;
pub mod error;
pub mod evaluate;
pub mod fitting;
pub mod inputs;
pub mod memory;
pub mod nccl_tests;
pub mod plan;
pub mod plot;
pub mod report;
pub mod runs;
pub mod schedule;
pub mod search;
pub mod shard;
pub mod sim;
pub mod sweep;
pub mod validate;

pub use error::{Error, Result};
