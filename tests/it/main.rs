//! Integration tests: one binary, one module per concern.

mod analytic_vs_sim;
mod cli;
mod commands;
mod common;
mod data;
mod korthikanti;
mod plan;
mod plot;
mod properties;
mod scaling;
mod schedules;
mod validate;
mod zero;
