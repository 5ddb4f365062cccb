//! A committed unit run (`metp-sim run --format json`, e.g. `reports/gpu/*/run-*.json`, or a
//! unit of `calibrate --format json`'s `units`, [`repredict_calibration`]) predicted again from a hardware profile, without running anything: the unit, its options and
//! where its devices ran are read from the run's own fields, and [`predict`] prices it with the
//! options the backend would have used (the CUDA units' program; p virtual devices on one GPU
//! run one after the other, so compute and messages scale by p). This is how a GPU run's unit
//! times are checked against a changed kernel model on a CPU.

use serde::Serialize;
use serde_json::Value;

use crate::backend::predict::{predict, PredictOptions};
use crate::backend::unit::device::Phase;
use crate::backend::unit::RunSpec;
use crate::backend::Runtime;
use crate::config::{ExecMethod, Hardware, Unit, UnitShape, WeightExchange};
use crate::error::{Error, Result};

/// One ring of a re-predicted run: predicted and measured sums over its steps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseRepredicted {
    /// Ring.
    pub phase: Phase,
    /// Predicted seconds (the critical device's steps, as `run` reports them).
    pub predicted_s: f64,
    /// Measured seconds, from the run.
    pub measured_s: f64,
}

/// A committed run against a new prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Repredicted {
    /// `method unit p=… s=… h=…`.
    pub name: String,
    /// The run's measured time.
    pub measured_s: f64,
    /// The prediction from the profile.
    pub predicted_s: f64,
    /// `(predicted − measured) / measured`.
    pub rel_error: f64,
    /// Per ring, where the run reports rings.
    pub phases: Vec<PhaseRepredicted>,
}

fn field<'a>(run: &'a Value, key: &str) -> Result<&'a Value> {
    run.get(key).ok_or_else(|| Error::Calibration {
        message: format!("not a `run --format json` output: no '{key}'"),
    })
}

fn count(v: &Value, key: &str) -> Result<usize> {
    field(v, key)?
        .as_u64()
        .filter(|&n| n > 0 && n <= 1 << 40)
        .map(|n| n as usize)
        .ok_or_else(|| Error::Calibration {
            message: format!("'{key}' must be a positive whole number"),
        })
}

/// The unit a `run --format json` output describes, and the options its backend predicts with.
pub fn run_spec(run: &Value) -> Result<(RunSpec, PredictOptions)> {
    let word = |key: &str| -> Result<&str> {
        field(run, key)?.as_str().ok_or_else(|| Error::Calibration {
            message: format!("'{key}' must be a string"),
        })
    };
    let flag = |key: &str| -> Result<bool> {
        field(run, key)?
            .as_bool()
            .ok_or_else(|| Error::Calibration {
                message: format!("'{key}' must be true or false"),
            })
    };
    let unit = match word("unit")? {
        "attention" => Unit::Attention,
        "mlp" => Unit::Mlp,
        other => {
            return Err(Error::Calibration {
                message: format!("unknown unit '{other}' (attention, mlp)"),
            })
        }
    };
    let method = match word("method")? {
        "metp" => ExecMethod::Metp,
        "tp" => ExecMethod::Tp,
        other => {
            return Err(Error::Calibration {
                message: format!("unknown method '{other}' (metp, tp)"),
            })
        }
    };
    let sh = field(run, "shape")?;
    let shape = UnitShape {
        b: count(sh, "b")?,
        s: count(sh, "s")?,
        h: count(sh, "h")?,
        a: count(sh, "a")?,
        f: count(sh, "f")?,
        p: count(sh, "p")?,
    };
    let mut spec = RunSpec::new(unit, method, shape);
    spec.causal = flag("causal")?;
    spec.fused = flag("flash")?;
    spec.metp.recv_buffers = count(run, "recv_buffers")? as u64;
    spec.metp.weight_exchange = match word("weight_exchange")? {
        "broadcast" => WeightExchange::Broadcast,
        "ring" => WeightExchange::Ring,
        other => {
            return Err(Error::Calibration {
                message: format!("unknown weight exchange '{other}' (broadcast, ring)"),
            })
        }
    };
    spec.unit_spec.check().map_err(|e| Error::Calibration {
        message: format!("the run's unit: {e}"),
    })?;
    if word("backend")? != "cuda" {
        return Err(Error::Calibration {
            message: "only CUDA runs are predicted again: a CPU run's speed depends on the \
                      load of the machine it ran on"
                .into(),
        });
    }
    // Devices sharing one GPU run one after the other (the backend's compute_scale and
    // transfer_scale); one GPU per device runs them side by side.
    let gpus = field(run, "gpu_memory")?
        .as_array()
        .map_or(1, |g| g.len().max(1));
    let shared = if gpus < shape.p { shape.p as f64 } else { 1.0 };
    Ok((
        spec,
        PredictOptions {
            compute_scale: shared,
            transfer_scale: shared,
            runtime: Runtime::Cuda,
            ..PredictOptions::default()
        },
    ))
}

/// The run `run` (a `run --format json` output of the CUDA backend) predicted from `hw`.
pub fn repredict(run: &Value, hw: &Hardware) -> Result<Repredicted> {
    let (spec, opts) = run_spec(run)?;
    let measured_s = field(run, "measured_time_s")?
        .as_f64()
        .filter(|t| t.is_finite() && *t > 0.0)
        .ok_or_else(|| Error::Calibration {
            message: "'measured_time_s' must be a positive time".into(),
        })?;
    let pred = predict(&spec, hw, opts);
    let mut phases = Vec::new();
    if let Some(list) = run.get("phases").and_then(Value::as_array) {
        for ph in list {
            let name = ph.get("phase").and_then(Value::as_str).unwrap_or("");
            let Some(measured) = ph.get("measured_s").and_then(Value::as_f64) else {
                continue;
            };
            let phase = match name {
                "fwd-attention" => Phase::FwdAttention,
                "bwd-attention" => Phase::BwdAttention,
                "fwd-mlp" => Phase::FwdMlp,
                "bwd-mlp" => Phase::BwdMlp,
                _ => continue,
            };
            let predicted_s = pred
                .steps
                .iter()
                .filter(|s| s.phase == phase)
                .map(|s| s.duration_s)
                .sum();
            phases.push(PhaseRepredicted {
                phase,
                predicted_s,
                measured_s: measured,
            });
        }
    }
    let sh = spec.shape;
    Ok(Repredicted {
        name: format!(
            "{} {} p={} s={} h={}",
            spec.method.id(),
            spec.unit.id(),
            sh.p,
            sh.s,
            sh.h
        ),
        measured_s,
        predicted_s: pred.time_s,
        rel_error: pred.time_s / measured_s - 1.0,
        phases,
    })
}

/// Every unit of a `calibrate --format json` output (its `units`: `spec`, `measured_time_s`,
/// `phases`, `gpu_memory`) predicted again from `hw`, in order, as [`repredict`] does a run.
pub fn repredict_calibration(cal: &Value, hw: &Hardware) -> Result<Vec<Repredicted>> {
    let backend = field(cal, "backend")?.clone();
    let units = field(cal, "units")?
        .as_array()
        .ok_or_else(|| Error::Calibration {
            message: "'units' must be a list".into(),
        })?;
    units
        .iter()
        .enumerate()
        .map(|(i, u)| {
            let at = |e: Error| Error::Calibration {
                message: format!(
                    "units[{i}]: {}",
                    e.to_string().trim_start_matches("calibration: ")
                ),
            };
            let spec = field(u, "spec").map_err(at)?;
            let metp = field(spec, "metp").map_err(at)?;
            let mut run = serde_json::Map::new();
            run.insert("backend".into(), backend.clone());
            for key in ["unit", "method", "shape", "causal"] {
                run.insert(key.into(), field(spec, key).map_err(at)?.clone());
            }
            run.insert("flash".into(), field(spec, "fused").map_err(at)?.clone());
            for key in ["recv_buffers", "weight_exchange"] {
                run.insert(key.into(), field(metp, key).map_err(at)?.clone());
            }
            for key in ["measured_time_s", "phases", "gpu_memory"] {
                if let Some(v) = u.get(key) {
                    run.insert(key.into(), v.clone());
                }
            }
            repredict(&Value::Object(run), hw).map_err(at)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_hardware;

    fn run() -> Value {
        serde_json::json!({
            "backend": "cuda", "unit": "mlp", "method": "metp",
            "shape": {"b": 1, "s": 4096, "h": 1024, "a": 8, "f": 4096, "p": 4},
            "causal": false, "flash": true, "recv_buffers": 2, "weight_exchange": "broadcast",
            "measured_time_s": 1e-3, "gpu_memory": [{"gpu": 0}],
            "phases": [{"phase": "fwd-mlp", "measured_s": 3e-4}]
        })
    }

    /// Four virtual devices on one GPU run one after the other: the prediction is the same
    /// unit's on four GPUs with compute and messages scaled by 4 (the backend's own scales).
    #[test]
    fn devices_sharing_one_gpu_scale_by_p() {
        let hw = load_hardware("hgx-h200").unwrap();
        let (_, one) = run_spec(&run()).unwrap();
        assert_eq!((one.compute_scale, one.transfer_scale), (4.0, 4.0));
        assert_eq!(one.runtime, Runtime::Cuda);
        let mut spread = run();
        spread["gpu_memory"] = serde_json::json!([{}, {}, {}, {}]);
        let (_, four) = run_spec(&spread).unwrap();
        assert_eq!((four.compute_scale, four.transfer_scale), (1.0, 1.0));
        let r = repredict(&run(), &hw).unwrap();
        assert_eq!(r.name, "metp mlp p=4 s=4096 h=1024");
        assert_eq!(r.phases.len(), 1);
        assert!(r.phases[0].predicted_s > 0.0 && r.phases[0].predicted_s < r.predicted_s);
        assert!((r.rel_error - (r.predicted_s / 1e-3 - 1.0)).abs() < 1e-12);
    }

    /// What is not a CUDA run is refused in one line that names the field.
    #[test]
    fn bad_runs_are_refused_by_name() {
        let hw = load_hardware("hgx-h200").unwrap();
        for (key, value, needle) in [
            ("backend", serde_json::json!("cpu"), "only CUDA runs"),
            ("unit", serde_json::json!("norm"), "unknown unit 'norm'"),
            (
                "measured_time_s",
                serde_json::json!(-1.0),
                "'measured_time_s'",
            ),
            ("shape", serde_json::json!({"b": 1}), "'s'"),
        ] {
            let mut r = run();
            r[key] = value;
            let e = repredict(&r, &hw).unwrap_err().to_string();
            assert!(e.contains(needle) && !e.contains('\n'), "{key}: {e}");
        }
        let e = repredict_calibration(&serde_json::json!({"backend": "cuda", "units": [{}]}), &hw)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("units[0]: not a `run --format json` output: no 'spec'"),
            "{e}"
        );
    }
}
