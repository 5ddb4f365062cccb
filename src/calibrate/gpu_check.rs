//! What `scripts/gpu-check.sh` needs besides the backend: the deterministic held-out split of a
//! measurement file ([`split`]: every n-th entry of each kind held out, the rest to fit) and the
//! inputs of its closing table (`report::gpu_check_table`): per kernel kind, the median and
//! largest |error| of the profile fitted without the held-out entries ([`held_out_errors`], from
//! `metp-sim kernels --compare --format json`), and per unit, predicted against measured time
//! and memory ([`unit_rows`], from `calibrate --format json` and `run --format json`). Always
//! built; tested on CPU.

use serde_json::Value;

use crate::error::{Error, Result};
use crate::fitting::measurements::KernelMeasurements;
use crate::fitting::price::KindErrors;

/// Splits `m` (see [`KernelMeasurements::split`]). Returns (fit, held out).
pub fn split(
    m: &KernelMeasurements,
    every: usize,
) -> Result<(KernelMeasurements, KernelMeasurements)> {
    m.split(every)
}

/// The per-kind errors of a `kernels --compare --format json` report (its `by_kind`).
pub fn held_out_errors(report: &Value) -> Result<Vec<KindErrors>> {
    let by_kind = report.get("by_kind").ok_or_else(|| Error::Calibration {
        message: "not a `kernels --compare --format json` report: no 'by_kind'".into(),
    })?;
    let kinds: Vec<KindErrors> =
        serde_json::from_value(by_kind.clone()).map_err(|e| Error::Calibration {
            message: format!("'by_kind' of a `kernels --compare` report: {e}"),
        })?;
    // A file read from disk: every row one `kernels --compare` can write.
    for (i, k) in kinds.iter().enumerate() {
        let bad = |why: String| Error::Calibration {
            message: format!("by_kind[{i}] ({}): {why}", k.kind.name()),
        };
        if k.samples == 0 {
            return Err(bad("0 samples: a kind without samples has no errors".into()));
        }
        let share = |v: f64| v.is_finite() && v >= 0.0;
        if !share(k.median_abs_error) || !share(k.max_abs_error) {
            return Err(bad(format!(
                "|error| {} / {} is not a non-negative share",
                k.median_abs_error, k.max_abs_error
            )));
        }
        if k.median_abs_error > k.max_abs_error {
            return Err(bad(format!(
                "median |error| {} above the largest {}",
                k.median_abs_error, k.max_abs_error
            )));
        }
        if kinds[..i].iter().any(|o| o.kind == k.kind) {
            return Err(bad("listed twice".into()));
        }
    }
    Ok(kinds)
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
    /// Measured peak bytes of one device (CUDA: the driver's count).
    pub measured_bytes: u64,
    /// Peak of the tracked buffers of one device (absent in files written before the field
    /// existed, whose `measured_peak_bytes` was the tracked peak).
    pub tracked_bytes: Option<u64>,
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
/// output, each with positive, finite times and a non-negative error (`Err`: the first row
/// that is not); `Ok(None)` for anything else.
pub fn unit_rows(v: &Value) -> Result<Option<Vec<UnitRow>>> {
    let Some(rows) = unit_rows_unchecked(v) else {
        return Ok(None);
    };
    for r in &rows {
        let time = |t: f64| t.is_finite() && t > 0.0;
        if !time(r.predicted_s) || !time(r.measured_s) {
            return Err(Error::Calibration {
                message: format!(
                    "{}: predicted {} s, measured {} s: not positive times",
                    r.name, r.predicted_s, r.measured_s
                ),
            });
        }
        if !(r.max_rel_error.is_finite() && r.max_rel_error >= 0.0) {
            return Err(Error::Calibration {
                message: format!(
                    "{}: max_rel_error {} is not an error",
                    r.name, r.max_rel_error
                ),
            });
        }
    }
    Ok(Some(rows))
}

fn unit_rows_unchecked(v: &Value) -> Option<Vec<UnitRow>> {
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
                tracked_bytes: u(x, "tracked_peak_bytes"),
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
        tracked_bytes: u(v, "tracked_peak_bytes"),
        inventory_bytes: u(v, "predicted_peak_bytes"),
        max_rel_error: f(v, "max_rel_error")?,
    }])
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
    fn calib_held_out_errors_read_a_kernels_compare_report() {
        // What `metp-sim kernels --hw hgx-h200 --input <shared file> --compare --format json`
        // writes.
        let hw = crate::config::load_hardware("hgx-h200").unwrap();
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("hardware-profiles/measurements/h200-pytorch-2026-11-30.json");
        let (items, timing) = crate::fitting::price::read_input(&path).unwrap();
        let priced = crate::fitting::price::price(&hw, &items, timing, true);
        let v: Value = serde_json::from_str(&crate::atomic::to_json(&priced)).unwrap();
        assert_eq!(held_out_errors(&v).unwrap(), priced.by_kind);
        assert!(!priced.by_kind.is_empty());
        assert!(held_out_errors(&serde_json::json!({"kernels": []})).is_err());
        // A negative median, or a kind with no samples, is not a row `kernels` writes.
        for (field, value) in [
            ("median_abs_error", serde_json::json!(-0.3)),
            ("samples", serde_json::json!(0)),
        ] {
            let mut t = v.clone();
            t["by_kind"][0][field] = value;
            assert!(held_out_errors(&t).is_err(), "{field}");
        }
    }

    #[test]
    fn calib_unit_rows_read_calibrate_and_run_outputs() {
        let run = serde_json::json!({
            "unit": "mlp", "method": "tp", "shape": {"b": 1, "s": 8, "h": 4, "a": 2, "f": 8, "p": 2},
            "predicted_time_s": 2.0, "measured_time_s": 1.0, "measured_peak_bytes": 7,
            "predicted_peak_bytes": null, "max_rel_error": 0.001
        });
        let r = unit_rows(&run).unwrap().unwrap();
        assert_eq!(r[0].inventory_bytes, None);
        assert!(r[0].name.starts_with("tp mlp p=2 s=8"));
        assert!(unit_rows(&serde_json::json!({"x": 1})).unwrap().is_none());
        let mut bad = run.clone();
        bad["measured_time_s"] = serde_json::json!(-1.0);
        assert!(unit_rows(&bad).is_err());
    }
}
