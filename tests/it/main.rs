//! Integration tests: one binary, one module per concern.

mod calib;
mod cli;
mod common;
mod data;
mod gpu;
mod korthikanti;
mod plot;
mod properties;
mod scaling;
mod schedules;
mod zero;
