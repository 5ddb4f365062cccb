//! Whether a log's numbers add up: each row's algbw must be its size over its time, its busbw
//! its algbw times nccl-tests' factor for the operation and the run's ranks. The ranks are the
//! header's `Rank` lines where it lists them, else what the bus factor implies (all-reduce,
//! all-gather, reduce-scatter, all-to-all), else the caller's. A row that does not add up is
//! refused in one line naming it.

use super::log::{Log, Row, Timing};
use super::op::TestOp;
use crate::error::{shown, Error, Result};

/// What a checked log says about its run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// Ranks, where the log determines them.
    pub ranks: Option<u64>,
    /// Nodes (distinct hosts of the `Rank` lines), where listed.
    pub nodes: Option<u64>,
}

/// Half the last printed digit of a time: nccl-tests prints `%7.2f` below 100 µs, `%7.1f`
/// below 10 ms, `%7.0f` above.
fn time_half_ulp(t: f64) -> f64 {
    if t < 100.0 {
        0.005
    } else if t < 10_000.0 {
        0.05
    } else {
        0.5
    }
}

/// Slack for a printed bandwidth `expected` from unrounded inputs: the cell's own rounding
/// (0.005), the time's relative rounding, and 1%.
fn slack(expected: f64, time_us: f64) -> f64 {
    0.006 + expected * (0.01 + time_half_ulp(time_us) / time_us.max(1e-9))
}

/// Checks `log` as a run of `op`; `ranks` is what the caller knows (`--gpus`, `--nodes`),
/// used when the log neither lists its ranks nor implies them.
pub fn check(log: &Log, op: TestOp, ranks: Option<u64>) -> Result<Run> {
    let fail = |line: usize, message: String| Error::Parse {
        path: log.name.clone().into(),
        message: format!("line {line}: {message}"),
    };
    if let (Some(test), Some(line)) = (log.test, log.test_line) {
        if test != op {
            return Err(fail(
                line,
                format!(
                    "the log is a {}_perf run, not {} (--op)",
                    test.binary(),
                    op.id()
                ),
            ));
        }
    }
    for r in &log.rows {
        for (t, place) in placements(r) {
            if r.size_bytes == 0 || t.time_us <= 0.0 {
                continue;
            }
            let algbw = r.size_bytes as f64 / (t.time_us * 1e3);
            if (t.algbw_gb_s - algbw).abs() > slack(algbw, t.time_us) {
                return Err(fail(
                    r.line,
                    format!(
                        "the row does not add up: {} bytes in {} µs ({place}) is an algbw of \
                         {algbw:.2} GB/s, the row says {}",
                        r.size_bytes,
                        shown(t.time_us),
                        shown(t.algbw_gb_s)
                    ),
                ));
            }
        }
    }
    let listed = (!log.ranks.is_empty()).then_some(log.ranks.len() as u64);
    // The bus factor's ranks, from the row whose bandwidth is printed most precisely. Where
    // the factor depends on the ranks, a ratio that no rank count gives is a log whose bus
    // bandwidth is not its own (a tampered or mislabelled column), refused here.
    let depends = op.bus_factor(2) != op.bus_factor(4);
    let best = log
        .rows
        .iter()
        .filter(|r| r.out_of_place.algbw_gb_s >= 1.0)
        .max_by(|a, b| {
            a.out_of_place
                .algbw_gb_s
                .total_cmp(&b.out_of_place.algbw_gb_s)
        });
    let implied = match best {
        None => None,
        Some(r) => {
            let ratio = r.out_of_place.busbw_gb_s / r.out_of_place.algbw_gb_s;
            match op.ranks_from_ratio(ratio) {
                Some(n) => Some((n, r.line)),
                None if depends => {
                    return Err(fail(
                        r.line,
                        format!(
                            "busbw / algbw is {}, which no rank count gives for {} \
                             (nccl-tests' factor): the log's bus bandwidth does not match its \
                             algorithm bandwidth",
                            shown(ratio),
                            op.id()
                        ),
                    ))
                }
                None => None,
            }
        }
    };
    let n = match (listed, implied) {
        (Some(l), Some((i, line))) if l != i => {
            return Err(fail(
                line,
                format!(
                    "busbw / algbw is the factor of {i} ranks for {}, but the header lists {l} \
                     ranks",
                    op.id()
                ),
            ))
        }
        (Some(l), _) => Some(l),
        (None, Some((i, _))) => Some(i),
        (None, None) => ranks,
    };
    // A factor of 1 (sendrecv, broadcast, reduce) is checked whatever the ranks.
    if let Some(n) = n.or((!depends).then_some(1)) {
        let over = if depends {
            format!(" over {n} ranks")
        } else {
            String::new()
        };
        let f = op.bus_factor(n);
        for r in &log.rows {
            for (t, place) in placements(r) {
                if r.size_bytes == 0 || t.time_us <= 0.0 {
                    continue;
                }
                let algbw = r.size_bytes as f64 / (t.time_us * 1e3);
                let want = algbw * f;
                if (t.busbw_gb_s - want).abs() > slack(want, t.time_us) {
                    return Err(fail(
                        r.line,
                        format!(
                            "busbw {} GB/s ({place}) is not algbw × {f:.4} = {want:.2}, nccl-tests' \
                             factor for {}{over}: the log's bus bandwidth does not match \
                             its ranks",
                            shown(t.busbw_gb_s),
                            op.id()
                        ),
                    ));
                }
            }
            if r.size_bytes > 0 && r.count != op.count(r.size_bytes, n, r.elem_bytes) {
                return Err(fail(
                    r.line,
                    format!(
                        "count {} is not what {} over {n} ranks of {} gives for {} bytes ({})",
                        r.count,
                        op.id(),
                        r.dtype,
                        r.size_bytes,
                        op.count(r.size_bytes, n, r.elem_bytes)
                    ),
                ));
            }
        }
    }
    let nodes = (!log.ranks.is_empty()).then(|| log.hosts().len() as u64);
    Ok(Run { ranks: n, nodes })
}

fn placements(r: &Row) -> Vec<(&Timing, &'static str)> {
    let mut v = vec![(&r.out_of_place, "out-of-place")];
    if let Some(t) = &r.in_place {
        v.push((t, "in-place"));
    }
    v
}
