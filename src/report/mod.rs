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
mod runs_groups;
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
pub use overlap::{overlap_csv, overlap_json, overlap_table};
pub use plan::{plan_csv, plan_json, plan_table, ranked_columns, rejected_columns};
pub use runs::{
    paper_short, runs_chart, runs_json, runs_markdown, runs_summary, runs_table, write_runs,
    PLOT_STEM as RUNS_PLOT_STEM,
};
pub use simulate::{
    axes_text, fits_line, simulate_csv, simulate_json, simulate_json_with, simulate_table,
    simulate_table_with, write_timeline, write_trace,
};
pub use sweep::{sweep_csv, sweep_csv_header, sweep_csv_row, sweep_json, sweep_table, write_sweep};
pub use sweep_plots::plot_files as sweep_plot_files;
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

/// The header lines every report prints under its title: `attention: NAME`, when the profile
/// has a step clock the clock a step's GEMMs run at, when it has a fleet clock spread the share
/// of that clock the job's slowest GPU holds, when gradients are accumulated in a pass
/// of their own its bytes, and, when part of the kernel model is a
/// placeholder, `placeholder kernel figures: …`.
pub fn attention_header(w: &crate::config::Workload) -> String {
    let mut s = format!("attention: {}\n", attention_kernel(w));
    if let Some(f) = &w.hardware.kernels.gemm.step_clock_fraction {
        s.push_str(&format!(
            "GEMMs in a step: at {:.4} of the calibrated clock (the profile's \
             kernels.gemm.step_clock_fraction)\n",
            f.value
        ));
    }
    if let (Some(spread), Some(job)) = (
        &w.hardware.kernels.gemm.fleet_clock_spread,
        w.hardware.kernels.gemm.job_clock_fraction,
    ) {
        let gpus = w.devices_needed();
        s.push_str(&format!(
            "GEMMs at {job:.4} of that clock: the slowest of the job's {gpus} GPUs, whose \
             clocks spread {:.2}% from GPU to GPU (the profile's \
             kernels.gemm.fleet_clock_spread; 1 − spread × E[max of N standard normals])\n",
            spread.value * 100.0
        ));
    }
    if let (crate::config::LinearDtype::Fp8, Some(f)) =
        (w.options.linear_dtype, &w.hardware.gpu.peak_fp8_flops_per_s)
    {
        s.push_str(&format!(
            "linear layers in FP8: QKV, projection and MLP GEMMs at the FP8 peak ({:.0} \
             TFLOP/s, the profile's gpu.peak_fp8_flops_per_s), their bf16 inputs cast first; \
             attention, embedding and head bf16; MFU of the FP8 peak (--linear-dtype fp8)\n",
            f.value / 1e12
        ));
    }
    let accumulation = w
        .options
        .grad_accumulation
        .pass_bytes_per_param(w.options.grad_dtype);
    if accumulation > 0 {
        s.push_str(&format!(
            "gradients accumulated in a separate pass: {accumulation} bytes per parameter and \
             micro-batch (--grad-accumulation separate)\n"
        ));
    }
    if let Some(p) = placeholder(w) {
        s.push_str(&format!("placeholder kernel figures: {p}\n"));
    }
    s
}

/// Longest slug ([`file_slug`], [`joined_slug`]): a file name holds at most 255 bytes, and a
/// slug goes into a name with a prefix or suffix (`claims-…`, `…-p8-cp2.png`).
pub const MAX_SLUG_CHARS: usize = 96;

/// A file-name-safe form of a name: lower-case ASCII letters, digits and dots, every other run
/// of characters one `-` (`LLaMA-2 7B` → `llama-2-7b`); at most [`MAX_SLUG_CHARS`] characters
/// (a longer one keeps its beginning and ends in a hash of the whole, so that two long names
/// stay apart).
pub fn file_slug(s: &str) -> String {
    bounded(slug(s))
}

/// The slugs of `names` joined by `-`, bounded like [`file_slug`]: the folder of several
/// models, profiles or both (`claims-<profiles>`, `<model>-<hardware>`).
pub fn joined_slug<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    bounded(names.into_iter().map(slug).collect::<Vec<_>>().join("-"))
}

/// `s` if it is at most [`MAX_SLUG_CHARS`] long, else its first characters, `-` and 16 hex
/// digits of an FNV-1a hash of the whole (`s` is ASCII).
fn bounded(s: String) -> String {
    if s.len() <= MAX_SLUG_CHARS {
        return s;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let keep = MAX_SLUG_CHARS - 17;
    format!("{}-{h:016x}", s[..keep].trim_end_matches('-'))
}

fn slug(s: &str) -> String {
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
    use super::{file_slug, joined_slug, MAX_SLUG_CHARS};

    #[test]
    fn slugs_keep_letters_digits_and_dots() {
        assert_eq!(file_slug("LLaMA-2 7B"), "llama-2-7b");
        assert_eq!(file_slug("  dgx-a100 (80 GB) "), "dgx-a100-80-gb");
        assert_eq!(file_slug("gpt3-1.3b"), "gpt3-1.3b");
    }

    /// A name of the longest length a profile may have (256 characters), or several joined,
    /// gives a slug that fits in a file name with room for a prefix; two such names that differ
    /// only at the end stay apart.
    #[test]
    fn long_names_give_bounded_distinct_slugs() {
        let a = "x".repeat(256);
        let b = format!("{}y", "x".repeat(255));
        for s in [
            file_slug(&a),
            joined_slug([a.as_str(), b.as_str(), a.as_str()]),
        ] {
            assert!(s.len() <= MAX_SLUG_CHARS, "{s}");
        }
        assert_ne!(file_slug(&a), file_slug(&b));
        assert_eq!(
            joined_slug(["LLaMA-2 7B", "dgx-a100"]),
            "llama-2-7b-dgx-a100"
        );
    }
}
