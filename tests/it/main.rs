//! Integration tests: one binary, one module per concern.

mod analytic_vs_sim;
mod cli;
mod commands;
mod common;
mod data;
mod korthikanti;
mod plot;
mod properties;
mod scaling;
mod schedules;
mod unit_memory;
mod validate;
mod zero;
