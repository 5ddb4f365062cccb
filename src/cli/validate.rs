//! `metp-sim validate`: the claims report.

use std::path::PathBuf;

use clap::Args;

use crate::error::Result;
use crate::plot::{self, AxisFormat, Chart, Series};
use crate::report;
use crate::validate::{self, Claim};

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Output folder.
    #[arg(long, default_value = "reports/claims")]
    out: PathBuf,
    /// Write SVG plots only (no PNG).
    #[arg(long)]
    svg_only: bool,
}

fn axis(kind: &str) -> AxisFormat {
    match kind {
        "bytes" => AxisFormat::Bytes,
        "tokens" => AxisFormat::Tokens,
        "percent" => AxisFormat::Percent,
        _ => AxisFormat::Plain,
    }
}

pub fn run(a: ValidateArgs) -> Result<String> {
    let claims = validate::check_all()?;
    let exts: &[&str] = if a.svg_only {
        &["svg"]
    } else {
        &["svg", "png"]
    };
    let mut files = Vec::new();
    for c in &claims {
        for p in &c.plots {
            let mut chart = Chart::new(p.title.clone(), p.x_label.clone(), p.y_label.clone())
                .with_formats(axis(&p.x_kind), axis(&p.y_kind))
                .with_log(p.x_log2, p.y_log);
            if let Some((y, label)) = &p.reference {
                chart = chart.with_reference(*y, label.clone());
            }
            for s in &p.series {
                chart = chart.with_series(Series::new(s.name.clone(), s.points.clone()));
            }
            for ext in exts {
                let path = a.out.join(format!("{}.{ext}", p.file));
                plot::write_chart(&chart, &path)?;
                files.push(path);
            }
        }
    }
    report::write_atomic(
        &a.out.join("claims.json"),
        report::claims_json(&claims).as_bytes(),
    )?;
    report::write_atomic(
        &a.out.join("claims.md"),
        report::claims_markdown(&claims, exts).as_bytes(),
    )?;
    Ok(summary(&claims, &a.out))
}

fn summary(claims: &[Claim], out: &std::path::Path) -> String {
    let mut s = String::new();
    for c in claims {
        s.push_str(&format!("{}: {} — {}\n", c.id, c.verdict.words(), c.claim));
    }
    s.push_str(&format!(
        "wrote {}/claims.md, claims.json and plots\n",
        out.display()
    ));
    s
}
