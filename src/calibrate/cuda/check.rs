//! What `scripts/gpu-check.sh` needs besides the backend: the deterministic held-out split of a
//! measurement file ([`split`]: every n-th entry of each kind held out, the rest to fit) and the
//! closing table ([`table`]): per kernel kind, the median and largest |error| of the profile
//! fitted without the held-out entries (read from `metp-sim kernels --compare --format json`),
//! and per unit, predicted against measured time and memory (from `calibrate --format json`
//! and `run --format json`). Always built; tested on CPU.

use serde_json::Value;

use crate::calibrate::measurements::KernelMeasurements;
use crate::error::{Error, Result};
use crate::report::Table;

/// Splits `m`: entry i of each kind (GEMMs, attention calls, copy sizes, messages,
/// collectives, slowdown samples) is held out when `i % every == every − 1` — every `every`-th,
/// starting with the `every`-th, so held-out entries are spread over the grid's sizes — and
/// kept for the fit otherwise. Both files keep the host overhead. Returns (fit, held out).
pub fn split(
    m: &KernelMeasurements,
    every: usize,
) -> Result<(KernelMeasurements, KernelMeasurements)> {
    if every < 2 {
        return Err(Error::arg("--every", "must be at least 2"));
    }
    fn part<T: Clone>(v: &[T], every: usize, held: bool) -> Vec<T> {
        v.iter()
            .enumerate()
            .filter(|(i, _)| (i % every == every - 1) == held)
            .map(|(_, x)| x.clone())
            .collect()
    }
    let make = |held: bool| KernelMeasurements {
        what: format!(
            "{} [{}: every {every}th entry of each kind {} (metp-sim gpu-check split)]",
            m.what,
            if held { "held-out part" } else { "fit part" },
            if held { "kept" } else { "removed" }
        ),
        gemm: part(&m.gemm, every, held),
        attention: part(&m.attention, every, held),
        copy: part(&m.copy, every, held),
        p2p: part(&m.p2p, every, held),
        collectives: part(&m.collectives, every, held),
        overlap: part(&m.overlap, every, held),
        ..m.clone()
    };
    Ok((make(false), make(true)))
}

/// One kernel kind's held-out errors as read from a `kernels --compare` report.
#[derive(Debug, Clone, PartialEq)]
pub struct KindErrors {
    /// Kind (`gemm`, `attention fwd`, …).
    pub kind: String,
    /// Entries compared, when the report says.
    pub n: Option<u64>,
    /// Median |error| (fraction).
    pub median: f64,
    /// Largest |error| (fraction).
    pub max: f64,
}

fn num_field(
    o: &serde_json::Map<String, Value>,
    pred: impl Fn(&str) -> bool,
) -> Option<(String, f64)> {
    o.iter()
        .filter(|(k, _)| pred(&k.to_lowercase()))
        .find_map(|(k, v)| v.as_f64().map(|x| (k.clone(), x)))
}

/// A fraction from a field that may hold a percentage (its name says `pct` or `percent`).
fn fraction(key: &str, x: f64) -> f64 {
    let k = key.to_lowercase();
    if k.contains("pct") || k.contains("percent") {
        x / 100.0
    } else {
        x.abs()
    }
}

fn stats_of(o: &serde_json::Map<String, Value>) -> Option<(f64, f64, Option<u64>)> {
    let (mk, med) = num_field(o, |k| k.contains("median"))?;
    let (xk, max) = num_field(o, |k| {
        (k.contains("max") || k.contains("largest") || k.contains("worst")) && !k.contains("median")
    })?;
    let n = ["n", "count", "entries", "samples"]
        .iter()
        .find_map(|k| o.get(*k).and_then(Value::as_u64));
    Some((fraction(&mk, med), fraction(&xk, max), n))
}

/// Per-kind median and largest |error| found in a `kernels --compare --format json` report:
/// objects with a `kind` (or `op`) name and fields whose names contain `median` and
/// `max`/`largest`, or such objects keyed by the kind name. Errors are fractions (a field
/// named `…pct…`/`…percent…` is read as a percentage).
pub fn kind_errors(report: &Value) -> Vec<KindErrors> {
    let mut out: Vec<KindErrors> = Vec::new();
    fn visit(v: &Value, key: Option<&str>, out: &mut Vec<KindErrors>) {
        match v {
            Value::Object(o) => {
                let named = ["kind", "op", "name"]
                    .iter()
                    .find_map(|k| o.get(*k).and_then(Value::as_str))
                    .map(str::to_string)
                    .or_else(|| key.map(str::to_string));
                if let (Some(kind), Some((median, max, n))) = (named, stats_of(o)) {
                    if !out.iter().any(|k| k.kind == kind) {
                        out.push(KindErrors {
                            kind,
                            n,
                            median,
                            max,
                        });
                    }
                    return;
                }
                for (k, x) in o {
                    visit(x, Some(k), out);
                }
            }
            Value::Array(a) => {
                for x in a {
                    visit(x, None, out);
                }
            }
            _ => {}
        }
    }
    visit(report, None, &mut out);
    out
}

/// One unit, predicted and measured.
#[derive(Debug, Clone, PartialEq)]
pub struct UnitRow {
    /// `metp attention p=4 s=16384 h=4096`.
    pub name: String,
    /// Predicted seconds.
    pub predicted_s: f64,
    /// Measured seconds.
    pub measured_s: f64,
    /// Measured peak bytes of one device.
    pub measured_bytes: u64,
    /// The unit inventory's peak (METP).
    pub inventory_bytes: Option<u64>,
    /// Largest error against the reference.
    pub max_rel_error: f64,
}

fn unit_name(unit: &Value, method: &Value, shape: &Value) -> String {
    let g = |k: &str| shape.get(k).and_then(Value::as_u64).unwrap_or(0);
    format!(
        "{} {} p={} s={} h={} a={} f={}",
        method.as_str().unwrap_or("?"),
        unit.as_str().unwrap_or("?"),
        g("p"),
        g("s"),
        g("h"),
        g("a"),
        g("f")
    )
}

/// Units of a `calibrate --format json` report (`units[]`) or of a `run --format json`
/// output; `None` for anything else.
pub fn unit_rows(v: &Value) -> Option<Vec<UnitRow>> {
    let f = |o: &Value, k: &str| o.get(k).and_then(Value::as_f64);
    let u = |o: &Value, k: &str| o.get(k).and_then(Value::as_u64);
    if let Some(units) = v.get("units").and_then(Value::as_array) {
        let mut rows = Vec::new();
        for x in units {
            let spec = x.get("spec")?;
            rows.push(UnitRow {
                name: unit_name(spec.get("unit")?, spec.get("method")?, spec.get("shape")?),
                predicted_s: f(x.get("predicted")?, "time_s")?,
                measured_s: f(x, "measured_time_s")?,
                measured_bytes: u(x, "measured_peak_bytes")?,
                inventory_bytes: u(x, "inventory_peak_bytes"),
                max_rel_error: f(x, "max_rel_error")?,
            });
        }
        return Some(rows);
    }
    Some(vec![UnitRow {
        name: unit_name(v.get("unit")?, v.get("method")?, v.get("shape")?),
        predicted_s: f(v, "predicted_time_s")?,
        measured_s: f(v, "measured_time_s")?,
        measured_bytes: u(v, "measured_peak_bytes")?,
        inventory_bytes: u(v, "predicted_peak_bytes"),
        max_rel_error: f(v, "max_rel_error")?,
    }])
}

/// The closing table of the GPU check: kernel kinds (goal: median ≤ 5%, none over 15%) and
/// units (goal: time within 10%, METP memory equal to the inventory), with a verdict per row.
pub fn table(kinds: &[KindErrors], units: &[UnitRow], notes: &[String]) -> String {
    let mut s = String::new();
    let mut t = Table::new(
        &[
            "kernel kind (held out)",
            "n",
            "median |error|",
            "largest |error|",
            "goal ≤5% / ≤15%",
        ],
        &[false, true, true, true, false],
    );
    for k in kinds {
        let ok = k.median <= 0.05 && k.max <= 0.15;
        t.row(vec![
            k.kind.clone(),
            k.n.map(|n| n.to_string()).unwrap_or_else(|| "-".into()),
            format!("{:.1}%", 100.0 * k.median),
            format!("{:.1}%", 100.0 * k.max),
            if ok { "met" } else { "NOT met" }.into(),
        ]);
    }
    if kinds.is_empty() {
        t.row(vec![
            "(no held-out comparison)".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
        ]);
    }
    s.push_str(&t.render());
    s.push('\n');
    let mut t = Table::new(
        &[
            "unit",
            "predicted_s",
            "measured_s",
            "time error",
            "measured peak B",
            "inventory peak B",
            "max_rel_error",
            "goal: ≤10%, memory equal",
        ],
        &[false, true, true, true, true, true, true, false],
    );
    for u in units {
        let err = if u.measured_s > 0.0 {
            (u.predicted_s - u.measured_s) / u.measured_s
        } else {
            f64::INFINITY
        };
        let mem_ok = u.inventory_bytes.is_none_or(|i| i == u.measured_bytes);
        let verdict = match (err.abs() <= 0.10, mem_ok) {
            (true, true) => "met",
            (false, true) => "time NOT met",
            (true, false) => "memory NOT equal",
            (false, false) => "time and memory NOT met",
        };
        t.row(vec![
            u.name.clone(),
            format!("{:.6}", u.predicted_s),
            format!("{:.6}", u.measured_s),
            format!("{:+.1}%", 100.0 * err),
            u.measured_bytes.to_string(),
            u.inventory_bytes
                .map(|b| b.to_string())
                .unwrap_or_else(|| "-".into()),
            format!("{:.2e}", u.max_rel_error),
            verdict.into(),
        ]);
    }
    if units.is_empty() {
        let mut row = vec!["(no unit ran)".to_string()];
        row.extend(std::iter::repeat_n("-".to_string(), 7));
        t.row(row);
    }
    s.push_str(&t.render());
    for n in notes {
        s.push_str(&format!("note: {n}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> KernelMeasurements {
        KernelMeasurements::read(
            &std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("hardware-profiles/measurements/h200-pytorch-2026-11-30.json"),
        )
        .unwrap()
    }

    #[test]
    fn calib_split_holds_out_every_nth_of_each_kind() {
        let m = shared();
        let (fit, held) = split(&m, 4).unwrap();
        // 4 GEMMs: the 4th held out; 12 attention calls: 3 held out (indices 3, 7, 11).
        assert_eq!((fit.gemm.len(), held.gemm.len()), (3, 1));
        assert_eq!(held.gemm[0], m.gemm[3]);
        assert_eq!((fit.attention.len(), held.attention.len()), (9, 3));
        assert_eq!(held.attention[1], m.attention[7]);
        assert_eq!(fit.copy.len() + held.copy.len(), m.copy.len());
        assert_eq!(held.eager_op_s, m.eager_op_s);
        fit.validate(std::path::Path::new("fit")).unwrap();
        // Deterministic: same input, same output.
        assert_eq!(split(&m, 4).unwrap().1, held);
        assert!(split(&m, 1).is_err());
    }

    #[test]
    fn calib_kind_errors_read_the_compare_summary() {
        let v: Value = serde_json::json!({
            "entries": [{"op": "gemm", "m": 1, "predicted_s": 1.0}],
            "summary": [
                {"kind": "gemm", "n": 150, "median_abs_rel_error": 0.021, "max_abs_rel_error": 0.09},
                {"kind": "attention fwd", "n": 40, "median_abs_rel_error": 0.06, "max_abs_rel_error": 0.2}
            ]
        });
        let k = kind_errors(&v);
        assert_eq!(k.len(), 2);
        assert_eq!(k[0].kind, "gemm");
        assert_eq!(k[0].n, Some(150));
        assert!((k[1].max - 0.2).abs() < 1e-12);
        // `kernels --compare --format json`: `by_kind` entries named by `kind`, `samples`.
        let v = serde_json::json!({
            "timing": "isolated",
            "kernels": [{"op": "gemm", "m": 8, "n": 8, "k": 8, "predicted_s": 1e-5, "measured_s": 1.1e-5, "error": -0.09}],
            "by_kind": [
                {"kind": "gemm", "samples": 151, "median_abs_error": 0.031, "max_abs_error": 0.12},
                {"kind": "attention-bwd", "samples": 40, "median_abs_error": 0.05, "max_abs_error": 0.14}
            ]
        });
        let k = kind_errors(&v);
        assert_eq!(k.len(), 2, "{k:?}");
        assert_eq!((k[0].kind.as_str(), k[0].n), ("gemm", Some(151)));
        assert!((k[1].median - 0.05).abs() < 1e-12);
        // Keyed by kind, in percent.
        let v = serde_json::json!({"per_kind": {"copy": {"median_pct": 3.0, "largest_pct": 12.0}}});
        let k = kind_errors(&v);
        assert_eq!(k[0].kind, "copy");
        assert!((k[0].median - 0.03).abs() < 1e-12);
    }

    #[test]
    fn calib_gpu_table_gives_verdicts() {
        let kinds = vec![
            KindErrors {
                kind: "gemm".into(),
                n: Some(10),
                median: 0.02,
                max: 0.08,
            },
            KindErrors {
                kind: "attention bwd".into(),
                n: None,
                median: 0.07,
                max: 0.3,
            },
        ];
        let units = vec![UnitRow {
            name: "metp attention p=4".into(),
            predicted_s: 1.05,
            measured_s: 1.0,
            measured_bytes: 100,
            inventory_bytes: Some(100),
            max_rel_error: 3e-3,
        }];
        let t = table(&kinds, &units, &["n".into()]);
        assert!(t.contains("gemm") && t.contains("2.0%") && t.contains("8.0%"));
        assert!(t.contains("NOT met"));
        assert!(t.contains("+5.0%"));
        assert!(t
            .lines()
            .any(|l| l.contains("metp attention") && l.ends_with("met")));
    }

    #[test]
    fn calib_unit_rows_read_calibrate_and_run_outputs() {
        let run = serde_json::json!({
            "unit": "mlp", "method": "tp", "shape": {"b": 1, "s": 8, "h": 4, "a": 2, "f": 8, "p": 2},
            "predicted_time_s": 2.0, "measured_time_s": 1.0, "measured_peak_bytes": 7,
            "predicted_peak_bytes": null, "max_rel_error": 0.001
        });
        let r = unit_rows(&run).unwrap();
        assert_eq!(r[0].inventory_bytes, None);
        assert!(r[0].name.starts_with("tp mlp p=2 s=8"));
        assert!(unit_rows(&serde_json::json!({"x": 1})).is_none());
    }
}
