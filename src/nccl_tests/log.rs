//! Reading an nccl-tests or rccl-tests log (`src/common.cu`'s table): every variant operators
//! publish — one process driving all GPUs (`-g 8`) or one per GPU, lines prefixed by `mpirun`
//! (`[1,0]<stdout>:`) or `srun -l` (` 0: `), out-of-place and in-place columns, a `#wrong` or
//! an `error` column, with or without the `redop` and `root` columns, rccl-tests' extra lines,
//! Markdown fences around it. A log is untrusted input: a line that looks like a row but is not
//! one, a second table, a size twice or too many rows is refused in one line naming the line.
//!
//! Reads the table and what the header says about the run (the test's name, the ranks and the
//! hosts they ran on); whether its numbers add up is [`super::check`]'s business.

use std::path::Path;

use super::op::{type_bytes, TestOp};
use crate::config::limits::{MAX_NCCL_LOG_ROWS, MAX_NCCL_SIZE_BYTES};
use crate::error::{Error, Result};

/// Time and bandwidths of one placement (out-of-place or in-place).
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// Microseconds per call.
    pub time_us: f64,
    /// Algorithm bandwidth, GB/s (10^9 bytes).
    pub algbw_gb_s: f64,
    /// Bus bandwidth, GB/s.
    pub busbw_gb_s: f64,
    /// The `#wrong` or `error` cell as printed (`N/A`, a count, an error magnitude).
    pub wrong: Option<String>,
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Line of the log (1-based).
    pub line: usize,
    /// Bytes (nccl-tests' `size`).
    pub size_bytes: u64,
    /// Elements per rank as printed.
    pub count: u64,
    /// Element type as printed.
    pub dtype: String,
    /// Bytes per element.
    pub elem_bytes: u64,
    /// Reduction, where the table has the column.
    pub redop: Option<String>,
    /// Root, where the table has the column.
    pub root: Option<i64>,
    /// Out-of-place figures.
    pub out_of_place: Timing,
    /// In-place figures, where printed.
    pub in_place: Option<Timing>,
}

/// A rank as the header lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct RankLine {
    /// The rank.
    pub rank: u64,
    /// Host it ran on.
    pub host: String,
    /// GPU name.
    pub gpu: String,
}

/// A parsed log.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Log {
    /// The file (or name) it came from.
    pub name: String,
    /// Rows, in log order.
    pub rows: Vec<Row>,
    /// The ranks the header lists.
    pub ranks: Vec<RankLine>,
    /// The test the log names (a command line, `Collective test starting`, a `*_perf` word).
    pub test: Option<TestOp>,
    /// The line that named it.
    pub test_line: Option<usize>,
}

impl Log {
    /// Distinct hosts of the listed ranks, in order of appearance.
    pub fn hosts(&self) -> Vec<&str> {
        let mut v: Vec<&str> = Vec::new();
        for r in &self.ranks {
            if !v.contains(&r.host.as_str()) {
                v.push(&r.host);
            }
        }
        v
    }
}

/// Which columns a table has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    redop: bool,
    root: bool,
    wrong: bool,
}

/// Reads and parses the log at `path` (at most the input-file bound).
pub fn read(path: &Path) -> Result<Log> {
    let text = crate::config::read_text(path)?;
    parse(&text, &path.display().to_string())
}

/// Parses a log's text; `name` goes into errors.
pub fn parse(text: &str, name: &str) -> Result<Log> {
    let fail = |line: usize, message: String| Error::Parse {
        path: name.into(),
        message: format!("line {line}: {message}"),
    };
    let mut log = Log {
        name: name.to_string(),
        ..Log::default()
    };
    let mut layout: Option<(Layout, usize)> = None;
    let mut table_start: Option<usize> = None;
    let mut rows_ended = false;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = strip_prefixes(raw.trim_end_matches('\r'));
        let t = line.trim();
        if t.is_empty() || t.starts_with("```") || t.starts_with("**") {
            continue;
        }
        if let Some(op) = test_name(t) {
            match log.test {
                Some(prev) if prev != op => {
                    return Err(fail(
                        line_no,
                        format!(
                            "names the test {} but line {} named {}: one test's output per file",
                            op.binary(),
                            log.test_line.unwrap_or(0),
                            prev.binary()
                        ),
                    ))
                }
                Some(_) => {}
                None => {
                    log.test = Some(op);
                    log.test_line = Some(line_no);
                }
            }
        }
        if let Some(h) = t.strip_prefix('#') {
            let h = h.trim();
            if let Some(rank) = rank_line(h) {
                log.ranks.push(rank);
            } else if let Some(l) = header(h) {
                if !log.rows.is_empty() {
                    return Err(fail(
                        line_no,
                        format!(
                            "a second result table (the first began at line {}): one test's \
                             output per file",
                            table_start.unwrap_or(0)
                        ),
                    ));
                }
                layout = Some((l, line_no));
            } else if !log.rows.is_empty() {
                rows_ended = true;
            }
            continue;
        }
        if !t.as_bytes()[0].is_ascii_digit() {
            continue;
        }
        if rows_ended {
            return Err(fail(
                line_no,
                format!(
                    "a table row after the table ended (it began at line {}): one test's output \
                     per file",
                    table_start.unwrap_or(0)
                ),
            ));
        }
        if log.rows.len() >= MAX_NCCL_LOG_ROWS {
            return Err(fail(
                line_no,
                format!("more than {MAX_NCCL_LOG_ROWS} rows (an nccl-tests sweep has a few dozen)"),
            ));
        }
        let row = parse_row(t, layout.map(|l| l.0)).map_err(|m| fail(line_no, m))?;
        if let Some(prev) = log
            .rows
            .iter()
            .find(|r| r.size_bytes == row.size_bytes && row.size_bytes > 0)
        {
            return Err(fail(
                line_no,
                format!(
                    "size {} appears twice (line {}): one test's output per file",
                    row.size_bytes, prev.line
                ),
            ));
        }
        table_start.get_or_insert(line_no);
        log.rows.push(Row {
            line: line_no,
            ..row
        });
    }
    if log.rows.is_empty() {
        return Err(Error::Parse {
            path: name.into(),
            message: "no nccl-tests result rows (size, count, type, …, time, algbw, busbw)".into(),
        });
    }
    Ok(log)
}

/// Removes what launchers put before a line: `[1,0]<stdout>:` (Open MPI `--tag-output`),
/// ` 0: ` (`srun -l`).
fn strip_prefixes(line: &str) -> &str {
    let mut s = line;
    loop {
        let t = s.trim_start();
        if let Some(rest) = t.strip_prefix('[') {
            if let Some(end) = rest.find("]<std") {
                let after = &rest[end + 1..];
                if let Some(colon) = after.find(">:") {
                    s = &after[colon + 2..];
                    continue;
                }
            }
        }
        let digits = t.bytes().take_while(u8::is_ascii_digit).count();
        let rest = &t[digits..];
        if digits > 0 && (rest.starts_with(": ") || rest == ":") {
            s = &t[digits + 1..];
            continue;
        }
        return s;
    }
}

/// The test a line names: a `*_perf` word (a command line, a `Collective test starting` line,
/// a note about the run).
fn test_name(line: &str) -> Option<TestOp> {
    line.split(|c: char| {
        c.is_whitespace() || c == '/' || c == ',' || c == '`' || c == '(' || c == ')'
    })
    .filter(|w| w.contains("_perf"))
    .find_map(TestOp::parse)
}

/// `Rank 0 Group 0 Pid 54740 on thanos device 0 [0x07] NVIDIA A100-SXM4-80GB` (rccl-tests has
/// no `Group`).
fn rank_line(h: &str) -> Option<RankLine> {
    let w: Vec<&str> = h.split_whitespace().collect();
    if w.first() != Some(&"Rank") {
        return None;
    }
    let rank = w.get(1)?.parse().ok()?;
    let on = w.iter().position(|&x| x == "on")?;
    let host = w.get(on + 1)?.to_string();
    let dev = w.iter().position(|&x| x == "device")?;
    let gpu_at = w
        .iter()
        .skip(dev + 2)
        .position(|x| !x.starts_with('['))
        .map(|p| p + dev + 2);
    let gpu = gpu_at.map_or(String::new(), |g| w[g..].join(" "));
    Some(RankLine { rank, host, gpu })
}

/// The column header (`size count type redop root time algbw busbw #wrong …`).
fn header(h: &str) -> Option<Layout> {
    let w: Vec<&str> = h.split_whitespace().collect();
    if w.first() != Some(&"size") || !w.contains(&"count") || !w.contains(&"time") {
        return None;
    }
    Some(Layout {
        redop: w.contains(&"redop"),
        root: w.contains(&"root"),
        wrong: w.contains(&"#wrong") || w.contains(&"error") || w.contains(&"wrong"),
    })
}

fn number(tok: &str, what: &str) -> std::result::Result<f64, String> {
    let v: f64 = tok
        .parse()
        .map_err(|_| format!("{what} '{tok}' is not a number"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!(
            "{what} '{tok}' is not a finite non-negative number"
        ));
    }
    Ok(v)
}

fn whole(tok: &str, what: &str) -> std::result::Result<u64, String> {
    tok.parse()
        .map_err(|_| format!("{what} '{tok}' is not a whole number"))
}

fn is_int(tok: &str) -> bool {
    let t = tok.strip_prefix('-').unwrap_or(tok);
    !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())
}

/// One row; `layout` from the header when one came before it, else inferred from the tokens.
fn parse_row(t: &str, layout: Option<Layout>) -> std::result::Result<Row, String> {
    let w: Vec<&str> = t.split_whitespace().collect();
    if w.len() < 6 {
        return Err(format!(
            "'{}' looks like a table row but has {} columns (size, count, type, …, time, algbw, \
             busbw)",
            t.chars().take(80).collect::<String>(),
            w.len()
        ));
    }
    let size_bytes = whole(w[0], "size")?;
    if size_bytes > MAX_NCCL_SIZE_BYTES {
        return Err(format!(
            "size {size_bytes} is more than 2^{} bytes",
            MAX_NCCL_SIZE_BYTES.trailing_zeros()
        ));
    }
    let count = whole(w[1], "count")?;
    let dtype = w[2].to_string();
    let elem_bytes = type_bytes(&dtype).ok_or_else(|| format!("unknown element type '{dtype}'"))?;
    let mut k = 3;
    let alpha = |s: &str| s.chars().next().is_some_and(|c| c.is_ascii_alphabetic());
    let layout = layout.unwrap_or_else(|| {
        let redop = w.get(3).is_some_and(|s| alpha(s));
        let rest = w.len() - 3 - redop as usize;
        // Groups of (time, algbw, busbw[, wrong]); a leading integer is the root when the
        // counts say so.
        let root_first = w.get(3 + redop as usize).is_some_and(|s| is_int(s));
        let (root, wrong) = match rest {
            9 | 5 => (true, true),
            8 => (false, true),
            7 => (true, false),
            6 | 3 => (false, false),
            4 => (root_first, !root_first),
            _ => (false, true),
        };
        Layout { redop, root, wrong }
    });
    let redop = if layout.redop {
        let r = w.get(k).ok_or("no redop column")?.to_string();
        k += 1;
        Some(r)
    } else {
        None
    };
    let root = if layout.root {
        let tok = *w.get(k).ok_or("no root column")?;
        k += 1;
        Some(
            tok.parse::<i64>()
                .map_err(|_| format!("root '{tok}' is not a whole number"))?,
        )
    } else {
        None
    };
    let group = if layout.wrong { 4 } else { 3 };
    let rest = &w[k..];
    if rest.len() != group && rest.len() != 2 * group {
        return Err(format!(
            "expected {} or {} columns after the element type's, found {} in '{}'",
            k - 3 + group,
            k - 3 + 2 * group,
            w.len() - 3,
            t.chars().take(80).collect::<String>()
        ));
    }
    let timing = |c: &[&str], place: &str| -> std::result::Result<Timing, String> {
        Ok(Timing {
            time_us: number(c[0], &format!("{place} time"))?,
            algbw_gb_s: number(c[1], &format!("{place} algbw"))?,
            busbw_gb_s: number(c[2], &format!("{place} busbw"))?,
            wrong: c.get(3).map(|s| s.to_string()),
        })
    };
    let out_of_place = timing(&rest[..group], "out-of-place")?;
    let in_place = if rest.len() == 2 * group {
        Some(timing(&rest[group..], "in-place")?)
    } else {
        None
    };
    Ok(Row {
        line: 0,
        size_bytes,
        count,
        dtype,
        elem_bytes,
        redop,
        root,
        out_of_place,
        in_place,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_of_launchers_are_removed() {
        assert_eq!(
            strip_prefixes("[1,0]<stdout>:    8  2 float"),
            "    8  2 float"
        );
        assert_eq!(
            strip_prefixes(" 0:      8388608  2097152"),
            "      8388608  2097152"
        );
        assert_eq!(
            strip_prefixes("           8  2 float"),
            "           8  2 float"
        );
    }

    #[test]
    fn a_row_without_root_and_with_an_error_column() {
        // NVIDIA/nccl #1244's layout: size count type redop time algbw busbw error (twice).
        let l = header("size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error");
        let r = parse_row(
            "4             1     float     sum    47.54    0.00    0.00  0e+00    49.35    0.00    0.00  4e-07",
            l,
        )
        .unwrap();
        assert_eq!(r.root, None);
        assert_eq!(r.redop.as_deref(), Some("sum"));
        assert_eq!(r.out_of_place.time_us, 47.54);
        assert_eq!(r.in_place.unwrap().wrong.as_deref(), Some("4e-07"));
    }

    #[test]
    fn rows_are_inferred_without_a_header() {
        let r = parse_row(
            "1073741824     268435456     float     sum      -1   8247.6  130.19  227.83      0   8240.7  130.30  228.02      0",
            None,
        )
        .unwrap();
        assert_eq!((r.root, r.count), (Some(-1), 268435456));
        assert_eq!(r.in_place.unwrap().busbw_gb_s, 228.02);
        assert!(parse_row("8 2 float sum -1 abc 0.00 0.00 0", None)
            .unwrap_err()
            .contains("'abc'"));
    }
}
