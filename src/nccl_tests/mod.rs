//! nccl-tests and rccl-tests: what they would print on a profile, what a published log says,
//! and the link figures a log implies (DESIGN §8 `collectives`, `calibrate --fit-links`).
//!
//! - [`op`]: the operations nccl-tests times, their names, bus-bandwidth factors and counts;
//! - [`log`]: reading a log, every variant operators publish (untrusted input);
//! - [`check`]: whether a log's rows add up and its bus factor matches its ranks;
//! - [`sizes`]: `--sizes` specs (`8..16g`);
//! - [`compare`]: predicted against measured, and the shortfall verdict;
//! - [`fit`]: a profile's link figures fitted to logs (`calibrate --fit-links`).
//!
//! Predictions are the cost model's collective plans (the library's choice of algorithm and
//! protocol, the same plans the simulator runs). Depends on `config`, `cost`, `schedule`
//! (operation names), `atomic` (writing a fitted profile) and `error`; never on `sim`,
//! `calibrate`, `report` or `cli` (nothing in the model depends on it).

pub mod check;
pub mod compare;
pub mod fit;
pub mod log;
pub mod op;
pub mod sizes;

use std::path::PathBuf;

use serde::Serialize;

use crate::config::Hardware;
use crate::cost::collective;
use crate::cost::CostModel;
use crate::error::{Error, Result};
pub use compare::{Standing, Verdict};
pub use op::TestOp;

/// What `collectives` is asked.
#[derive(Debug, Clone)]
pub struct Request {
    /// The profile (its `nodes` is the default node count).
    pub hardware: Hardware,
    /// The operation.
    pub op: TestOp,
    /// Nodes (`--nodes`; default: the log's, else the profile's).
    pub nodes: Option<u64>,
    /// GPUs per node (`--gpus`; default: the log's, else the profile's).
    pub gpus: Option<u64>,
    /// Sizes (`--sizes`; default: the log's, else 8 B to 16 GiB).
    pub sizes: Option<Vec<u64>>,
    /// A log to compare with (`--compare`).
    pub compare: Option<PathBuf>,
}

/// One row: nccl-tests' columns predicted, and measured where a log was given.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReportRow {
    /// Buffer, bytes (nccl-tests' `size`).
    pub size_bytes: u64,
    /// Elements per rank.
    pub count: u64,
    /// Element type.
    #[serde(rename = "type")]
    pub dtype: String,
    /// Predicted time per call, µs.
    pub predicted_time_us: f64,
    /// Predicted algorithm bandwidth, GB/s.
    pub predicted_algbw_gb_s: f64,
    /// Predicted bus bandwidth, GB/s.
    pub predicted_busbw_gb_s: f64,
    /// The algorithm the library picks.
    pub algorithm: &'static str,
    /// The protocol it picks.
    pub protocol: &'static str,
    /// Measured out-of-place time, µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_time_us: Option<f64>,
    /// Measured out-of-place algorithm bandwidth, GB/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_algbw_gb_s: Option<f64>,
    /// Measured out-of-place bus bandwidth, GB/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_busbw_gb_s: Option<f64>,
    /// predicted / measured bus bandwidth − 1, from the times (measured / predicted − 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busbw_error: Option<f64>,
    /// The log line of the measured row.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_line: Option<usize>,
}

/// What `collectives` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Profile.
    pub hardware: String,
    /// Operation.
    pub op: &'static str,
    /// Nodes.
    pub nodes: u64,
    /// GPUs per node taking part.
    pub gpus_per_node: u64,
    /// Ranks in all.
    pub ranks: u64,
    /// nccl-tests' bus-bandwidth factor for the op over the ranks.
    pub bus_factor: f64,
    /// The collective library the profile describes.
    pub library: String,
    /// The log compared with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    /// Rows.
    pub rows: Vec<ReportRow>,
    /// The verdict on the measured curve.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    /// Notes (assumptions the comparison rests on).
    pub notes: Vec<String>,
}

/// The ranks of `nodes` nodes with `gpus` GPUs each on `hw`: the first `gpus` local ranks of
/// every node, node by node (the order nccl-tests' ranks take).
pub fn group(hw: &Hardware, nodes: u64, gpus: u64) -> Vec<u32> {
    (0..nodes)
        .flat_map(|n| (0..gpus).map(move |l| (n * hw.gpus_per_node + l) as u32))
        .collect()
}

/// A predicted row of `op` over `group` for a requested `size` of `dtype`.
pub fn predict(
    hw: &Hardware,
    op: TestOp,
    group: &[u32],
    size: u64,
    dtype: &str,
    elem_bytes: u64,
) -> ReportRow {
    let n = group.len() as u64;
    let size = op.effective_size(size, n, elem_bytes);
    let plan = collective::plan(&CostModel::new(hw), op.op(), group, size);
    let t = plan.time_s;
    let algbw = if t > 0.0 { size as f64 / t / 1e9 } else { 0.0 };
    ReportRow {
        size_bytes: size,
        count: op.count(size, n, elem_bytes),
        dtype: dtype.to_string(),
        predicted_time_us: t * 1e6,
        predicted_algbw_gb_s: algbw,
        predicted_busbw_gb_s: algbw * op.bus_factor(n),
        algorithm: plan.algorithm.id(),
        protocol: plan.protocol.id(),
        measured_time_us: None,
        measured_algbw_gb_s: None,
        measured_busbw_gb_s: None,
        busbw_error: None,
        log_line: None,
    }
}

/// The run's shape: nodes and GPUs per node from the flags, the log and the profile, checked
/// against each other.
fn shape(req: &Request, run: Option<check::Run>) -> Result<(u64, u64, Vec<String>)> {
    let hw = &req.hardware;
    let mut notes = Vec::new();
    let log_ranks = run.and_then(|r| r.ranks);
    let log_nodes = run.and_then(|r| r.nodes);
    let nodes = match (req.nodes, log_nodes) {
        (Some(a), Some(b)) if a != b => {
            return Err(Error::arg(
                "--nodes",
                format!("{a}, but the log's ranks ran on {b} hosts"),
            ))
        }
        (Some(a), _) => a,
        (None, Some(b)) => b,
        (None, None) => match log_ranks {
            Some(r) => {
                let n = r.div_ceil(hw.gpus_per_node.max(1));
                notes.push(format!(
                    "the log lists no hosts: {r} ranks taken as {n} node(s) of the profile's {} \
                     GPUs",
                    hw.gpus_per_node
                ));
                n
            }
            None => hw.nodes,
        },
    };
    if nodes == 0 {
        return Err(Error::arg("--nodes", "must be at least 1"));
    }
    let gpus = match (req.gpus, log_ranks) {
        (Some(g), Some(r)) if g * nodes != r => {
            return Err(Error::arg(
                "--gpus",
                format!(
                    "{g} per node on {nodes} node(s) is {} ranks, but the log has {r}",
                    g * nodes
                ),
            ))
        }
        (Some(g), _) => g,
        (None, Some(r)) => {
            if !r.is_multiple_of(nodes) {
                return Err(Error::arg(
                    "--nodes",
                    format!("the log's {r} ranks do not split evenly over {nodes} nodes"),
                ));
            }
            r / nodes
        }
        (None, None) => {
            if req.compare.is_some() {
                notes.push(format!(
                    "the log fixes no rank count ({} has a bus factor of 1): {} GPUs per node \
                     assumed (--gpus)",
                    req.op.id(),
                    hw.gpus_per_node
                ));
            }
            hw.gpus_per_node
        }
    };
    if gpus == 0 || gpus > hw.gpus_per_node {
        return Err(Error::arg(
            "--gpus",
            format!(
                "{gpus} per node: the profile's nodes have {} GPUs",
                hw.gpus_per_node
            ),
        ));
    }
    Ok((nodes, gpus, notes))
}

/// Refuses a table whose steps would take too long to price: [`MAX_COLLECTIVE_RANKS`] ranks, or
/// [`MAX_COLLECTIVE_PAIR_RANKS`] when the operation may exchange between every pair of ranks.
fn check_ranks(hw: &Hardware, op: TestOp, ranks: u64) -> Result<()> {
    use crate::config::limits::{MAX_COLLECTIVE_PAIR_RANKS, MAX_COLLECTIVE_RANKS};
    use crate::config::{Algorithm, Scope};
    let pairs = op == TestOp::AllToAll
        || hw
            .collectives
            .iter()
            .any(|r| r.algorithm == Algorithm::Direct && r.scope != Scope::Intra);
    let max = if pairs {
        MAX_COLLECTIVE_PAIR_RANKS
    } else {
        MAX_COLLECTIVE_RANKS
    };
    if ranks > max {
        return Err(Error::arg(
            "--nodes",
            format!(
                "{ranks} ranks: a {} table is priced for at most {max} ranks{} (config::limits)",
                op.id(),
                if pairs {
                    " (every pair of ranks exchanges)"
                } else {
                    ""
                }
            ),
        ));
    }
    Ok(())
}

/// `collectives`: nccl-tests' table predicted on the profile, compared with a log when given.
pub fn run(req: &Request) -> Result<Report> {
    let parsed = match &req.compare {
        Some(p) => {
            let l = log::read(p)?;
            let hint = match (req.nodes, req.gpus) {
                (Some(n), Some(g)) => Some(n * g),
                _ => None,
            };
            let run = check::check(&l, req.op, hint)?;
            Some((l, run))
        }
        None => None,
    };
    let (nodes, gpus, mut notes) = shape(req, parsed.as_ref().map(|p| p.1))?;
    let mut hw = req.hardware.clone();
    hw.set_nodes(nodes)?;
    check_ranks(&hw, req.op, nodes * gpus)?;
    let group = group(&hw, nodes, gpus);
    let ranks = group.len() as u64;
    let (dtype, elem_bytes) = parsed
        .as_ref()
        .and_then(|(l, _)| l.rows.first())
        .map_or(("float".to_string(), 4), |r| {
            (r.dtype.clone(), r.elem_bytes)
        });
    let sizes: Vec<u64> = match (&req.sizes, &parsed) {
        (Some(s), _) => s.clone(),
        (None, Some((l, _))) => l
            .rows
            .iter()
            .map(|r| r.size_bytes)
            .filter(|&s| s > 0)
            .collect(),
        (None, None) => sizes::parse_sizes("8..16g")?,
    };
    let mut rows = Vec::with_capacity(sizes.len());
    for s in sizes {
        let mut row = predict(&hw, req.op, &group, s, &dtype, elem_bytes);
        if let Some((l, _)) = &parsed {
            if let Some(m) = l
                .rows
                .iter()
                .find(|r| r.size_bytes == row.size_bytes && r.size_bytes > 0)
            {
                let t = &m.out_of_place;
                row.measured_time_us = Some(t.time_us);
                row.measured_algbw_gb_s = Some(t.algbw_gb_s);
                row.measured_busbw_gb_s = Some(t.busbw_gb_s);
                // From the times, not the printed bandwidths (two decimals).
                row.busbw_error = (t.time_us > 0.0 && row.predicted_time_us > 0.0)
                    .then(|| t.time_us / row.predicted_time_us - 1.0);
                row.log_line = Some(m.line);
            }
        }
        rows.push(row);
    }
    let verdict = parsed.as_ref().map(|_| {
        let pts: Vec<(u64, f64, f64)> = rows
            .iter()
            .filter_map(|r| {
                let e = r.busbw_error?;
                Some((
                    r.size_bytes,
                    r.predicted_busbw_gb_s,
                    r.predicted_busbw_gb_s / (1.0 + e),
                ))
            })
            .collect();
        compare::verdict(&pts)
    });
    if let Some((l, _)) = &parsed {
        let wrong = l
            .rows
            .iter()
            .filter(|r| {
                r.out_of_place
                    .wrong
                    .as_deref()
                    .is_some_and(|w| w.parse::<u64>().is_ok_and(|x| x > 0))
            })
            .count();
        if wrong > 0 {
            notes.push(format!("{wrong} rows report wrong results (#wrong > 0): the run is broken whatever its speed"));
        }
    }
    Ok(Report {
        hardware: hw.name.clone(),
        op: req.op.id(),
        nodes,
        gpus_per_node: gpus,
        ranks,
        bus_factor: req.op.bus_factor(ranks),
        library: hw.library().name.clone(),
        log: req.compare.as_ref().map(|p| p.display().to_string()),
        rows,
        verdict,
        notes,
    })
}
