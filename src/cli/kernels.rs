//! `metp-sim kernels --hw H --input FILE.json [--compare] [--format json|table]`: prices a list
//! of kernels (or every kernel of a measurement file) with a profile's kernel model
//! (`calibrate::price`).

use std::path::PathBuf;

use clap::Args;

use super::link::OutFormat;
use crate::calibrate::price::{price, read_input, Priced};
use crate::config::load_hardware;
use crate::error::Result;
use crate::report::{to_json, Table};

#[derive(Debug, Args)]
pub struct KernelsArgs {
    /// Hardware profile (name in hardware-profiles/ or a path).
    #[arg(long, default_value = "hgx-h200")]
    hw: String,
    /// A JSON list of kernels (DESIGN §8) or a kernel measurement file.
    #[arg(long)]
    input: PathBuf,
    /// Add each measured kernel's relative error and, per kind, the median and largest
    /// |error|.
    #[arg(long)]
    compare: bool,
    /// Output format (json: the kernels in input order with `predicted_s`; with --compare an
    /// object with `kernels` and `by_kind`).
    #[arg(long, value_enum, default_value = "table")]
    format: OutFormat,
}

pub fn run(a: KernelsArgs) -> Result<String> {
    let hw = load_hardware(&a.hw)?;
    let (items, timing) = read_input(&a.input)?;
    let p = price(&hw, &items, timing, a.compare);
    Ok(match a.format {
        OutFormat::Json if a.compare => to_json(&p),
        OutFormat::Json => to_json(&p.kernels),
        OutFormat::Table => table(&hw.name, &p, a.compare),
    })
}

fn shape_text(o: &serde_json::Value) -> String {
    let g = |k: &str| o[k].as_u64().unwrap_or(0);
    match o["op"].as_str().unwrap_or("") {
        "gemm" if g("batch") > 1 => format!("{}x {}x{}x{}", g("batch"), g("m"), g("n"), g("k")),
        "gemm" => format!("{}x{}x{}", g("m"), g("n"), g("k")),
        "attention" => format!(
            "{} b={} h={} q={} kv={} d={}{}",
            o["pass"].as_str().unwrap_or(""),
            g("batch"),
            g("heads"),
            g("q_tokens"),
            g("kv_tokens"),
            g("head_dim"),
            if o["causal"].as_bool() == Some(true) {
                " causal"
            } else {
                ""
            }
        ),
        _ => format!("{} B", g("bytes")),
    }
}

fn table(hw: &str, p: &Priced, compare: bool) -> String {
    let mut head = vec!["#", "op", "shape", "predicted_s", "device_s", "step_s"];
    if compare {
        head.extend(["measured_s", "error"]);
    }
    let mut right = vec![true, false, false, true, true, true];
    if compare {
        right.extend([true, true]);
    }
    let mut t = Table::new(&head, &right);
    for (i, o) in p.kernels.iter().enumerate() {
        let f = |k: &str| o[k].as_f64().map_or(String::new(), |v| format!("{v:.4e}"));
        let mut row = vec![
            i.to_string(),
            o["op"].as_str().unwrap_or("").to_string(),
            shape_text(o),
            f("predicted_s"),
            f("device_s"),
            f("step_s"),
        ];
        if compare {
            row.push(f("measured_s"));
            row.push(
                o["error"]
                    .as_f64()
                    .map_or(String::new(), |e| format!("{:+.1}%", 100.0 * e)),
            );
        }
        t.row(row);
    }
    let mut s = format!(
        "kernels priced with {hw} (predicted_s: {}; step_s: inside a training step)\n\n",
        match p.timing {
            crate::calibrate::Timing::Isolated => "an isolated call, launch gap included",
            crate::calibrate::Timing::Device => "the device time alone",
        }
    );
    s.push_str(&t.render());
    if compare && !p.by_kind.is_empty() {
        let mut k = Table::new(
            &["kind", "kernels", "median |error|", "largest |error|"],
            &[false, true, true, true],
        );
        for e in &p.by_kind {
            k.row(vec![
                e.kind.name().to_string(),
                e.samples.to_string(),
                format!("{:.1}%", 100.0 * e.median_abs_error),
                format!("{:.1}%", 100.0 * e.max_abs_error),
            ]);
        }
        s.push('\n');
        s.push_str(&k.render());
    }
    s
}
