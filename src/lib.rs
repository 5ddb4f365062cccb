//! metp-sim: how long a sequence fits, how fast a step runs, and where memory and time go, for
//! METP (memory-efficient tensor parallelism) and the methods it competes with.
//!
//! Data flows one way (DESIGN §3): [`config`] loads models, hardware profiles and the workload;
//! [`memory`] builds each method's per-device tensor inventory and peak; [`search`] finds the
//! longest sequence that fits; [`report`] renders results and [`plot`] draws them (SVG/PNG);
//! [`cli`] is the thin command-line layer. [`exec`] runs METP's units for real on virtual
//! devices and [`calibrate`] measures a machine, fits a hardware profile and compares
//! predicted with measured unit times.
#![warn(missing_docs)]

pub mod analytic;
pub mod atomic;
pub mod calibrate;
pub mod cli;
pub mod config;
pub mod cost;
pub mod error;
pub mod evaluate;
pub mod exec;
pub mod memory;
pub mod plan;
pub mod plot;
pub mod report;
pub mod schedule;
pub mod search;
pub mod sim;
pub mod sweep;
pub mod validate;

pub use error::{Error, Result};
