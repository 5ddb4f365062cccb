//! Integration tests: one binary, one module per concern.

mod analytic_vs_sim;
mod calib;
mod cli;
mod commands;
mod common;
mod cuda_emu;
mod data;
mod gpu;
mod korthikanti;
mod layering;
mod plan;
mod plot;
mod properties;
mod scaling;
mod schedules;
mod unit_memory;
mod validate;
mod zero;
