//! `calibrate --fit-links LOG... --base PROFILE --out NEW`: the link figures that published
//! nccl-tests logs imply, written into a new profile with sources naming the logs.
//!
//! Each log is checked ([`super::check`]: rows that do not add up, or a bus factor that does not
//! match the ranks, are refused), then tied to the figure that bounds its large sizes on the
//! base profile: of the intra-node link (port, and a mesh's pair links with it), NVLS, the
//! library's point-to-point rate and the NICs, the one whose change moves the predicted time at
//! the log's largest size the most. Every such figure, and the latency that shapes the same
//! logs' mid sizes (the Simple protocol's step latency inside or across nodes, or NVLS's), is
//! fitted by least squares on log(predicted / measured) bus bandwidth over the rows from
//! [`FIT_FROM_BYTES`] up, one coordinate at a time. Latency-bound rows below that are left to
//! the library's own small-message figures.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::log::Log;
use super::op::TestOp;
use super::{check, group, predict};
use crate::config::limits::MAX_FIT_LINK_LOGS;
use crate::config::Hardware;
use crate::error::{Error, Result};

/// Rows from this size up enter the fit: the window the verdict judges
/// ([`super::compare::VERDICT_FROM_BYTES`]), where the Simple and NVLS regimes hold.
pub const FIT_FROM_BYTES: u64 = super::compare::VERDICT_FROM_BYTES;

/// A group of figures fitted together (scaled by one factor).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Param {
    /// The intra-node port (and a mesh's pair links).
    Intra,
    /// NVLS's rates.
    Nvls,
    /// The library's point-to-point rate inside a node.
    P2p,
    /// The NICs.
    Inter,
    /// The Simple protocol's step latency inside a node.
    IntraLatency,
    /// NVLS's latency.
    NvlsLatency,
    /// The Simple protocol's step latency across nodes.
    InterLatency,
}

impl Param {
    fn paths(self, lib: bool) -> &'static [&'static str] {
        match self {
            Param::Intra => &[
                "intra_node.bytes_per_s_per_direction",
                "intra_node.link_bytes_per_s_per_direction",
            ],
            Param::Nvls => &[
                "collective_library.nvls.bus_bytes_per_s",
                "collective_library.nvls.port_bytes_per_s",
            ],
            Param::P2p => &["collective_library.p2p_bytes_per_s"],
            Param::Inter => &["inter_node.bytes_per_s_per_nic"],
            Param::IntraLatency if lib => {
                &["collective_library.protocols.simple.intra_step_latency_s"]
            }
            Param::IntraLatency => &["intra_node.p2p_latency_s"],
            Param::NvlsLatency => &["collective_library.nvls.latency_s"],
            Param::InterLatency if lib => {
                &["collective_library.protocols.simple.inter_step_latency_s"]
            }
            Param::InterLatency => &["inter_node.latency_s"],
        }
    }

    /// The latency fitted with a bandwidth figure (none for the point-to-point rate: a
    /// send/recv log's one step says little about a collective's step latency).
    fn latency(self) -> Option<Param> {
        match self {
            Param::Nvls => Some(Param::NvlsLatency),
            Param::Inter => Some(Param::InterLatency),
            Param::Intra => Some(Param::IntraLatency),
            _ => None,
        }
    }

    fn id(self) -> &'static str {
        match self {
            Param::Intra => "intra-node link",
            Param::Nvls => "NVLS",
            Param::P2p => "point-to-point rate",
            Param::Inter => "NICs",
            Param::IntraLatency => "Simple step latency inside a node",
            Param::NvlsLatency => "NVLS latency",
            Param::InterLatency => "Simple step latency across nodes",
        }
    }
}

/// A figure's value at `path` in a profile as JSON.
fn get(v: &Value, path: &str) -> Option<f64> {
    path.split('.')
        .try_fold(v, |node, part| node.get(part))?
        .get("value")?
        .as_f64()
}

fn set(v: &mut Value, path: &str, value: f64, source: &str) {
    if let Some(fig) = path.split('.').try_fold(v, |node, part| node.get_mut(part)) {
        if fig.is_object() {
            fig["value"] = Value::from(value);
            fig["source"] = Value::from(source);
        }
    }
}

/// The base profile with each param's figures multiplied by its factor.
fn scaled(base: &Value, factors: &[(Param, f64)], lib: bool) -> Result<Hardware> {
    let mut v = base.clone();
    for &(p, f) in factors {
        for path in p.paths(lib) {
            if let Some(old) = get(&v, path) {
                set(&mut v, path, old * f, "fit in progress");
            }
        }
    }
    serde_json::from_value(v).map_err(|e| Error::Calibration {
        message: format!("fit-links: {e}"),
    })
}

/// One log ready to fit.
#[derive(Debug, Clone)]
struct Data {
    name: String,
    op: TestOp,
    nodes: u64,
    gpus: u64,
    dtype: String,
    elem_bytes: u64,
    /// (size, measured busbw) from [`FIT_FROM_BYTES`] up.
    rows: Vec<(u64, f64)>,
    largest: u64,
}

/// What a fitted log says.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogFit {
    /// The log.
    pub log: String,
    /// Its operation.
    pub op: &'static str,
    /// Nodes and GPUs per node.
    pub nodes: u64,
    /// GPUs per node.
    pub gpus_per_node: u64,
    /// The figure that bounds its large sizes.
    pub bounded_by: Param,
    /// Rows fitted.
    pub rows: usize,
    /// Median |predicted/measured − 1| busbw over its rows from 64 MiB on the base profile.
    pub median_error_before: f64,
    /// The same on the fitted profile.
    pub median_error_after: f64,
}

/// One fitted figure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FigureFit {
    /// The profile field.
    pub field: String,
    /// Base value.
    pub base: f64,
    /// Fitted value.
    pub fitted: f64,
}

/// What `calibrate --fit-links` did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkFitReport {
    /// The new profile's name.
    pub profile: String,
    /// Where it was written.
    pub out: String,
    /// Fitted figures.
    pub figures: Vec<FigureFit>,
    /// The logs.
    pub logs: Vec<LogFit>,
    /// Assumptions.
    pub notes: Vec<String>,
}

fn busbw(hw: &Hardware, d: &Data, size: u64) -> f64 {
    let g = group(hw, d.nodes, d.gpus);
    predict(hw, d.op, &g, size, &d.dtype, d.elem_bytes).predicted_busbw_gb_s
}

fn loss(hw: &Hardware, data: &[&Data]) -> f64 {
    data.iter()
        .flat_map(|d| {
            d.rows
                .iter()
                .map(move |&(s, m)| (busbw(hw, d, s) / m).ln().powi(2))
        })
        .sum()
}

fn median_error(hw: &Hardware, d: &Data) -> f64 {
    let mut e: Vec<f64> = d
        .rows
        .iter()
        .filter(|r| r.0 >= super::compare::VERDICT_FROM_BYTES)
        .map(|&(s, m)| (busbw(hw, d, s) / m - 1.0).abs())
        .collect();
    if e.is_empty() {
        return f64::NAN;
    }
    e.sort_by(f64::total_cmp);
    let n = e.len();
    if n % 2 == 1 {
        e[n / 2]
    } else {
        (e[n / 2 - 1] + e[n / 2]) / 2.0
    }
}

/// Minimises `f` over `x` in [lo, hi] (golden section on a unimodal enough function).
fn golden(f: &dyn Fn(f64) -> f64, mut lo: f64, mut hi: f64) -> f64 {
    let g = (5f64.sqrt() - 1.0) / 2.0;
    let (mut a, mut b) = (hi - g * (hi - lo), lo + g * (hi - lo));
    let (mut fa, mut fb) = (f(a), f(b));
    for _ in 0..48 {
        if fa < fb {
            hi = b;
            b = a;
            fb = fa;
            a = hi - g * (hi - lo);
            fa = f(a);
        } else {
            lo = a;
            a = b;
            fa = fb;
            b = lo + g * (hi - lo);
            fb = f(b);
        }
    }
    (lo + hi) / 2.0
}

/// Parses `OP=PATH` or `PATH`.
fn spec(s: &str) -> (Option<TestOp>, PathBuf) {
    if let Some((op, path)) = s.split_once('=') {
        if let Some(op) = TestOp::parse(op) {
            return (Some(op), PathBuf::from(path));
        }
    }
    (None, PathBuf::from(s))
}

fn load(s: &str, hw: &Hardware, notes: &mut Vec<String>) -> Result<Data> {
    let (op, path) = spec(s);
    let log: Log = super::log::read(&path)?;
    let op = op.or(log.test).ok_or_else(|| Error::Parse {
        path: path.clone(),
        message: "the log names no *_perf test: give the operation as OP=PATH (e.g. \
                  all-reduce=log.txt)"
            .into(),
    })?;
    let run = check::check(&log, op, None)?;
    let ranks = match run.ranks {
        Some(r) => r,
        None => {
            notes.push(format!(
                "{}: the log fixes no rank count; {} ranks (one node of the base profile) \
                 assumed",
                path.display(),
                hw.gpus_per_node
            ));
            hw.gpus_per_node
        }
    };
    let nodes = run
        .nodes
        .unwrap_or_else(|| ranks.div_ceil(hw.gpus_per_node.max(1)));
    if !ranks.is_multiple_of(nodes) || ranks / nodes > hw.gpus_per_node {
        return Err(Error::Parse {
            path,
            message: format!(
                "{ranks} ranks on {nodes} hosts do not fit the base profile's nodes of {} GPUs",
                hw.gpus_per_node
            ),
        });
    }
    let rows: Vec<(u64, f64)> = log
        .rows
        .iter()
        .filter(|r| r.size_bytes >= FIT_FROM_BYTES && r.out_of_place.busbw_gb_s > 0.0)
        .map(|r| (r.size_bytes, r.out_of_place.busbw_gb_s))
        .collect();
    let Some(&(largest, _)) = rows.iter().max_by_key(|r| r.0) else {
        return Err(Error::Parse {
            path,
            message: format!(
                "no row from {} up: nothing for a link fit",
                super::compare::human_bytes(FIT_FROM_BYTES)
            ),
        });
    };
    let first = &log.rows[0];
    Ok(Data {
        name: path.display().to_string(),
        op,
        nodes,
        gpus: ranks / nodes,
        dtype: first.dtype.clone(),
        elem_bytes: first.elem_bytes,
        rows,
        largest,
    })
}

/// Fits `base_name`'s link figures to the logs `specs` (`PATH` or `OP=PATH`) and writes the
/// profile to `out` (refusing an existing file unless `force`).
pub fn fit_links(
    specs: &[String],
    base_name: &str,
    out: &Path,
    force: bool,
) -> Result<LinkFitReport> {
    crate::atomic::check_output_file(out)?;
    if out.exists() && !force {
        return Err(Error::Exists {
            path: out.to_path_buf(),
        });
    }
    if specs.is_empty() || specs.len() > MAX_FIT_LINK_LOGS {
        return Err(Error::arg(
            "--fit-links",
            format!("give 1 to {MAX_FIT_LINK_LOGS} logs, got {}", specs.len()),
        ));
    }
    let base = crate::config::load_hardware(base_name)?;
    let lib = base.collective_library.is_some();
    let base_json = serde_json::to_value(&base).map_err(|e| Error::Calibration {
        message: e.to_string(),
    })?;
    let mut notes = Vec::new();
    let data: Vec<Data> = specs
        .iter()
        .map(|s| load(s, &base, &mut notes))
        .collect::<Result<_>>()?;
    // The figure bounding each log: the largest elasticity of its largest size's time.
    let mut bound = Vec::new();
    for d in &data {
        let t0 = 1.0 / busbw(&base, d, d.largest);
        let mut best: Option<(f64, Param)> = None;
        for p in [Param::Intra, Param::Nvls, Param::P2p, Param::Inter] {
            if !p
                .paths(lib)
                .iter()
                .any(|path| get(&base_json, path).is_some())
            {
                continue;
            }
            let hw = scaled(&base_json, &[(p, 1.01)], lib)?;
            let t1 = 1.0 / busbw(&hw, d, d.largest);
            let e = (t0 / t1).ln() / 1.01f64.ln();
            if best.is_none_or(|b| e > b.0) {
                best = Some((e, p));
            }
        }
        match best {
            Some((e, p)) if e > 0.3 => bound.push(p),
            _ => {
                return Err(Error::Calibration {
                    message: format!(
                        "{}: no link figure of {base_name} bounds this log's largest size \
                         (latency-bound?)",
                        d.name
                    ),
                })
            }
        }
    }
    let mut params: Vec<Param> = bound.clone();
    params.sort();
    params.dedup();
    let mut factors: Vec<(Param, f64)> = Vec::new();
    for &p in &params {
        factors.push((p, 1.0));
        if let Some(l) = p.latency() {
            if !factors.iter().any(|f| f.0 == l)
                && l.paths(lib)
                    .iter()
                    .any(|path| get(&base_json, path).is_some())
            {
                factors.push((l, 1.0));
            }
        }
    }
    // Which logs each factor is fitted on.
    let logs_of = |p: Param| -> Vec<&Data> {
        data.iter()
            .zip(&bound)
            .filter(|(_, b)| **b == p || b.latency() == Some(p))
            .map(|(d, _)| d)
            .collect()
    };
    for _round in 0..4 {
        for i in 0..factors.len() {
            let p = factors[i].0;
            let on = logs_of(p);
            let (lo, hi) = match p {
                Param::IntraLatency | Param::NvlsLatency | Param::InterLatency => {
                    ((1e-3f64).ln(), (1e3f64).ln())
                }
                // The point-to-point rate is capped by the link: above it nothing changes.
                Param::P2p => {
                    let p2p = get(&base_json, "collective_library.p2p_bytes_per_s").unwrap_or(1.0);
                    let link =
                        get(&base_json, "intra_node.bytes_per_s_per_direction").unwrap_or(p2p);
                    ((1.0 / 20.0f64).ln(), (link / p2p).max(1.0).ln())
                }
                _ => ((1.0 / 20.0f64).ln(), 20f64.ln()),
            };
            let eval = |x: f64| -> f64 {
                let mut f = factors.clone();
                f[i].1 = x.exp();
                scaled(&base_json, &f, lib).map_or(f64::INFINITY, |hw| loss(&hw, &on))
            };
            let x = golden(&eval, lo, hi);
            factors[i].1 = x.exp();
        }
    }
    // The profile: fitted figures with sources naming the logs.
    let label = format!(
        "fitted by metp-sim calibrate --fit-links {} --base {base_name}",
        specs.join(" ")
    );
    let mut v = base_json.clone();
    let mut figures = Vec::new();
    for &(p, f) in &factors {
        let on = logs_of(p);
        let rows: usize = on.iter().map(|d| d.rows.len()).sum();
        let names: Vec<&str> = on.iter().map(|d| d.name.as_str()).collect();
        let edge = if (f.ln().abs() - 20f64.ln()).abs() < 1e-3
            || (f.ln().abs() - 1e3f64.ln()).abs() < 1e-3
        {
            "; NOT determined by the data: the fit reached the edge of its range and is held there"
        } else {
            ""
        };
        for path in p.paths(lib) {
            let Some(old) = get(&base_json, path) else {
                continue;
            };
            let new = old * f;
            set(
                &mut v,
                path,
                new,
                &format!(
                    "{label}: the {} scaled ×{f:.4} from {base_name}'s {old:.6e} by least squares on \
                     log(predicted / measured) bus bandwidth over {rows} rows from {} of {}{edge}",
                    p.id(),
                    super::compare::human_bytes(FIT_FROM_BYTES),
                    names.join(", ")
                ),
            );
            figures.push(FigureFit {
                field: path.to_string(),
                base: old,
                fitted: new,
            });
        }
    }
    let name = out.file_stem().map_or_else(
        || format!("{base_name}-fitted"),
        |s| s.to_string_lossy().into_owned(),
    );
    v["name"] = Value::from(name.clone());
    let fitted: Hardware = serde_json::from_value(v).map_err(|e| Error::Calibration {
        message: format!("fit-links: {e}"),
    })?;
    fitted.validate(out)?;
    let logs = data
        .iter()
        .zip(&bound)
        .map(|(d, &b)| LogFit {
            log: d.name.clone(),
            op: d.op.id(),
            nodes: d.nodes,
            gpus_per_node: d.gpus,
            bounded_by: b,
            rows: d.rows.len(),
            median_error_before: median_error(&base, d),
            median_error_after: median_error(&fitted, d),
        })
        .collect();
    crate::atomic::write_atomic(out, crate::atomic::to_json(&fitted).as_bytes())?;
    Ok(LinkFitReport {
        profile: name,
        out: out.display().to_string(),
        figures,
        logs,
        notes,
    })
}
