//! Rendering results: human tables, JSON (the DESIGN §8 field names) and CSV, and atomic file
//! writes. Input: the result types of the modules below; output: strings or files. Nothing here
//! computes a number.
//!
//! Depends on `analytic`, `atomic`, `backend`, `calibrate`, `config`, `evaluate`, `fitting`,
//! `memory`, `nccl_tests`, `plan`, `plot`, `runs`, `schedule`, `search`, `shard`, `sim`,
//! `sweep`, `validate` and `error`; never on `cli`.

mod calibrate;
mod claims;
mod collectives;
mod columns;
mod memory;
mod overlap;
mod plan;
mod runs;
mod simulate;
mod sweep;
mod sweep_plots;
mod table;
mod timeline;

pub use calibrate::{calibration_table, fit_table, gpu_check_table, kernels_table, unit_run_table};
pub use claims::{
    claims_attention_note, claims_json, claims_markdown, claims_summary, write_claims,
};
pub use collectives::{collectives_csv, collectives_table, link_fit_table};
pub use columns::{csv, csv_header, csv_row, json_rows, table, Cell, Column, JsonRow};
pub use memory::{maxseq_csv, maxseq_json, maxseq_table, memory_csv, memory_json, memory_table};
pub use overlap::{overlap_json, overlap_table};
pub use plan::{plan_csv, plan_json, plan_table, ranked_columns, rejected_columns};
pub use runs::{
    paper_short, runs_chart, runs_json, runs_markdown, runs_summary, runs_table, write_runs,
    PLOT_STEM as RUNS_PLOT_STEM,
};
pub use simulate::{
    axes_text, fits_line, simulate_json, simulate_table, write_timeline, write_trace,
};
pub use sweep::{sweep_csv, sweep_csv_header, sweep_csv_row, sweep_json, sweep_table, write_sweep};
pub use table::{fmt_bytes, Table};

pub use crate::atomic::{to_json, write_atomic};
pub use timeline::timeline_spans;

/// Output format of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Aligned text for a terminal.
    Table,
    /// JSON (stable field names, DESIGN §8).
    Json,
    /// CSV with a header row.
    Csv,
}

/// The attention implementation a workload runs on its profile (`--attention-kernel`, the
/// profile's default, or `unfused`), as JSON's `attention_kernel` names it.
pub fn attention_kernel(w: &crate::config::Workload) -> &'static str {
    w.options.attention_kernel(&w.hardware).id()
}

/// What of the kernel model pricing this workload is not derived from measurements of its GPU
/// (the profile's placeholder note and the attention implementation's), if anything.
pub fn placeholder(w: &crate::config::Workload) -> Option<String> {
    w.hardware
        .kernels
        .placeholder_note(w.options.attention_kernel(&w.hardware))
}

/// The header lines every report prints under its title: `attention: NAME` and, when part of
/// the kernel model is a placeholder, `placeholder kernel figures: …`.
pub fn attention_header(w: &crate::config::Workload) -> String {
    let mut s = format!("attention: {}\n", attention_kernel(w));
    if let Some(p) = placeholder(w) {
        s.push_str(&format!("placeholder kernel figures: {p}\n"));
    }
    s
}

/// A file-name-safe form of a name: lower-case ASCII letters, digits and dots, every other run
/// of characters one `-` (`LLaMA-2 7B` → `llama-2-7b`).
pub fn file_slug(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect::<String>()
        .split('-')
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

/// Token counts as on the command line: 4096 → `4k`, 100000 → `100000`.
pub fn fmt_tokens(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{}m", n >> 20)
    } else if n >= 1024 && n.is_multiple_of(1024) {
        format!("{}k", n >> 10)
    } else {
        n.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::file_slug;

    #[test]
    fn slugs_keep_letters_digits_and_dots() {
        assert_eq!(file_slug("LLaMA-2 7B"), "llama-2-7b");
        assert_eq!(file_slug("  dgx-a100 (80 GB) "), "dgx-a100-80-gb");
        assert_eq!(file_slug("gpt3-1.3b"), "gpt3-1.3b");
    }
}
