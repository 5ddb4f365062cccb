//! Pricing a list of kernels with a profile's kernel model (`metp-sim kernels`, DESIGN §8), and
//! comparing the prices with measured times.
//!
//! Input: a JSON array of kernel objects — `{op: "gemm", m, n, k[, batch]}`, `{op: "attention",
//! pass: "fwd"|"bwd", batch, heads[, kv_heads], q_tokens, kv_tokens, head_dim, causal[,
//! implementation]}` (an attention implementation of the profile, `config::attention`; absent:
//! `--attention-kernel`'s or the profile's default; `unfused` is priced as its GEMMs and
//! softmax passes),
//! `{op: "copy"|"elementwise", bytes}` with `bytes` read plus written (an N-byte buffer copied
//! moves 2N) — whose other fields are kept and ignored; or a kernel measurement file
//! ([`KernelMeasurements`]), whose entries become such objects with `measured_s`. Output: the
//! objects in order, each with `predicted_s` (an isolated call, the way the measurements are
//! taken — or the device alone when a measurement file says `timing: device`), `device_s` and
//! `step_s` (what the kernel costs inside a training step) added; with measured times, the
//! relative error and per kind the median and largest |error|.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::measurements::{KernelMeasurements, Timing};
use crate::config::{AttentionKernel, Hardware};
use crate::cost::CostModel;
use crate::error::{Error, Result};
use crate::schedule::{Attention, AttnPass, Gemm, GemmDtype, KernelKind, KernelShape};

/// Errors of one kind of kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KindErrors {
    /// Kind.
    pub kind: KernelKind,
    /// Kernels of that kind with a measured time.
    pub samples: usize,
    /// Median of |predicted / measured − 1|.
    pub median_abs_error: f64,
    /// Largest |predicted / measured − 1|.
    pub max_abs_error: f64,
}

/// Per kind (in [`KernelKind::ALL`] order, kinds without samples left out): the median and
/// largest relative error of `(kind, predicted, measured)` triples.
pub fn kind_errors(priced: &[(KernelKind, f64, f64)]) -> Vec<KindErrors> {
    KernelKind::ALL
        .iter()
        .filter_map(|&kind| {
            let mut e: Vec<f64> = priced
                .iter()
                .filter(|p| p.0 == kind)
                .map(|&(_, p, m)| (p / m - 1.0).abs())
                .collect();
            if e.is_empty() {
                return None;
            }
            let max = e.iter().copied().fold(0.0, f64::max);
            Some(KindErrors {
                kind,
                samples: e.len(),
                median_abs_error: super::fit::median(&mut e),
                max_abs_error: max,
            })
        })
        .collect()
}

/// One kernel to price: its object, shape and measured time (if any).
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// The input object (kept in the output).
    pub object: Map<String, Value>,
    /// What the GPU runs.
    pub shape: KernelShape,
    /// The measured time the object carries.
    pub measured_s: Option<f64>,
    /// The measurement session of a GEMM (`session` in a measurement file or an object; 0
    /// when absent).
    pub session: u32,
    /// The attention implementation an attention entry names (`implementation`).
    pub attention: Option<AttentionKernel>,
}

/// How far one measurement session's GEMMs are from the prices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionErrors {
    /// The session (0: the first).
    pub session: u32,
    /// Its GEMMs with a measured time.
    pub samples: usize,
    /// The clock factor they were priced at (1 unless given, as the fit gives it).
    pub rate_factor: f64,
    /// Median of predicted / measured − 1: the session's offset (< 0: it ran slower).
    pub median_error: f64,
    /// Median of |predicted / measured − 1|.
    pub median_abs_error: f64,
    /// Largest |predicted / measured − 1|.
    pub max_abs_error: f64,
}

/// The priced list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Priced {
    /// How `predicted_s` prices a call.
    pub timing: Timing,
    /// The objects with `predicted_s`, `device_s`, `step_s` (and `error` where measured).
    pub kernels: Vec<Value>,
    /// Per measurement session, its GEMMs' errors (files of several sessions only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub by_session: Vec<SessionErrors>,
    /// Per kind, where times were measured.
    pub by_kind: Vec<KindErrors>,
}

/// Largest dimension accepted (2^40): far beyond any real call, small enough that no product
/// of the model overflows or loses its meaning.
const MAX_DIM: u64 = 1 << 40;

fn bad(path: &Path, field: String, message: &str) -> Error {
    Error::InvalidField {
        path: path.to_path_buf(),
        field,
        message: message.to_string(),
    }
}

fn dim(
    path: &Path,
    o: &Map<String, Value>,
    i: usize,
    key: &str,
    default: Option<u64>,
) -> Result<u64> {
    match o.get(key) {
        None if default.is_some() => Ok(default.unwrap_or(1)),
        None => Err(bad(path, format!("[{i}].{key}"), "is missing")),
        Some(v) => match v.as_u64() {
            Some(n) if (1..=MAX_DIM).contains(&n) => Ok(n),
            _ => Err(bad(
                path,
                format!("[{i}].{key}"),
                &format!("must be a whole number from 1 to 2^40, got {v}"),
            )),
        },
    }
}

fn time_field(path: &Path, o: &Map<String, Value>, i: usize, key: &str) -> Result<Option<f64>> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(t) if t.is_finite() && t > 0.0 => Ok(Some(t)),
            _ => Err(bad(
                path,
                format!("[{i}].{key}"),
                &format!("must be a positive time in seconds, got {v}"),
            )),
        },
    }
}

/// One kernel object of a list (DESIGN §8).
fn item(path: &Path, i: usize, v: &Value) -> Result<Item> {
    let Some(o) = v.as_object() else {
        return Err(bad(
            path,
            format!("[{i}]"),
            "must be an object with an `op`",
        ));
    };
    let op = o.get("op").and_then(Value::as_str).ok_or_else(|| {
        bad(
            path,
            format!("[{i}].op"),
            "must be \"gemm\", \"attention\", \"copy\" or \"elementwise\"",
        )
    })?;
    let d = |key: &str, default: Option<u64>| dim(path, o, i, key, default);
    let shape = match op {
        "gemm" => {
            let dtype = match o.get("dtype") {
                None => GemmDtype::Bf16,
                Some(v) => match v.as_str() {
                    Some("bf16") => GemmDtype::Bf16,
                    Some("fp8") => GemmDtype::Fp8,
                    _ => {
                        return Err(bad(
                            path,
                            format!("[{i}].dtype"),
                            &format!("must be \"bf16\" or \"fp8\", got {v}"),
                        ))
                    }
                },
            };
            KernelShape::Gemm(Gemm {
                dtype,
                ..Gemm::bf16(
                    d("batch", Some(1))?,
                    d("m", None)?,
                    d("n", None)?,
                    d("k", None)?,
                )
            })
        }
        "attention" => {
            let pass = match o.get("pass").and_then(Value::as_str) {
                Some("fwd") => AttnPass::Fwd,
                Some("bwd") => AttnPass::Bwd,
                _ => {
                    return Err(bad(
                        path,
                        format!("[{i}].pass"),
                        "must be \"fwd\" or \"bwd\"",
                    ))
                }
            };
            let causal = match o.get("causal") {
                Some(Value::Bool(c)) => *c,
                None => false,
                Some(v) => {
                    return Err(bad(
                        path,
                        format!("[{i}].causal"),
                        &format!("must be true or false, got {v}"),
                    ))
                }
            };
            let heads = d("heads", None)?;
            KernelShape::Attention(Attention {
                batch: d("batch", None)?,
                heads,
                kv_heads: d("kv_heads", Some(heads))?,
                q_tokens: d("q_tokens", None)?,
                kv_tokens: d("kv_tokens", None)?,
                head_dim: d("head_dim", None)?,
                causal,
                pass,
            })
        }
        "copy" => KernelShape::Copy {
            bytes: d("bytes", None)?,
        },
        "elementwise" => KernelShape::Elementwise {
            bytes: d("bytes", None)?,
        },
        other => {
            return Err(bad(
                path,
                format!("[{i}].op"),
                &format!("unknown op \"{other}\" (gemm, attention, copy, elementwise)"),
            ))
        }
    };
    let pass_time = match &shape {
        KernelShape::Attention(a) if a.pass == AttnPass::Fwd => "fwd_s",
        KernelShape::Attention(_) => "bwd_s",
        KernelShape::Copy { .. } => "copy_s",
        KernelShape::Elementwise { .. } => "mul_s",
        KernelShape::Gemm(_) => "s",
    };
    let measured_s = match time_field(path, o, i, "measured_s")? {
        Some(t) => Some(t),
        None => match time_field(path, o, i, "s")? {
            Some(t) => Some(t),
            None => time_field(path, o, i, pass_time)?,
        },
    };
    let session = match o.get("session") {
        None => 0,
        Some(v) => match v.as_u64().and_then(|k| u32::try_from(k).ok()) {
            Some(k) if k < crate::config::limits::MAX_MEASUREMENT_SESSIONS => k,
            _ => {
                return Err(bad(
                    path,
                    format!("[{i}].session"),
                    &format!(
                        "must be a whole number below {}",
                        crate::config::limits::MAX_MEASUREMENT_SESSIONS
                    ),
                ))
            }
        },
    };
    let attention = match o.get("implementation") {
        None => None,
        Some(v) => match (&shape, v.as_str().and_then(AttentionKernel::parse)) {
            (KernelShape::Attention(_), Some(k)) => Some(k),
            (KernelShape::Attention(_), None) => {
                return Err(bad(
                    path,
                    format!("[{i}].implementation"),
                    &format!(
                        "unknown attention implementation {v} (known: {})",
                        AttentionKernel::ALL.map(AttentionKernel::id).join(", ")
                    ),
                ))
            }
            _ => {
                return Err(bad(
                    path,
                    format!("[{i}].implementation"),
                    "only attention entries name an implementation",
                ))
            }
        },
    };
    Ok(Item {
        object: o.clone(),
        shape,
        measured_s,
        session,
        attention,
    })
}

/// The §8 object of a shape.
pub fn shape_object(shape: &KernelShape) -> Map<String, Value> {
    let v = match shape {
        KernelShape::Gemm(g) => {
            let mut v = json!({"op": "gemm", "m": g.m, "n": g.n, "k": g.k});
            if g.batch != 1 {
                v["batch"] = json!(g.batch);
            }
            if !g.dtype.is_bf16() {
                v["dtype"] = json!("fp8");
            }
            v
        }
        KernelShape::Attention(a) => json!({
            "op": "attention",
            "pass": match a.pass { AttnPass::Fwd => "fwd", AttnPass::Bwd => "bwd" },
            "batch": a.batch,
            "heads": a.heads,
            "kv_heads": a.kv_heads,
            "q_tokens": a.q_tokens,
            "kv_tokens": a.kv_tokens,
            "head_dim": a.head_dim,
            "causal": a.causal,
        }),
        KernelShape::Copy { bytes } => json!({"op": "copy", "bytes": bytes}),
        KernelShape::Elementwise { bytes } => json!({"op": "elementwise", "bytes": bytes}),
    };
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// Reads a kernel list or a measurement file; returns the items and how their measured times
/// were taken.
pub fn read_input(path: &Path) -> Result<(Vec<Item>, Timing)> {
    // Read once (a pipe gives its bytes once), parsed as whichever it is.
    let text = crate::config::read_text(path)?;
    let v: Value = crate::config::parse_json(path, &text)?;
    match v {
        Value::Array(items) => {
            let items: Vec<Item> = items
                .iter()
                .enumerate()
                .map(|(i, x)| item(path, i, x))
                .collect::<Result<_>>()?;
            check_list(path, &items)?;
            Ok((items, Timing::Isolated))
        }
        Value::Object(_) => {
            let m: KernelMeasurements = crate::config::parse_json(path, &text)?;
            m.validate(path)?;
            let items = m
                .samples()
                .into_iter()
                .map(|s| {
                    let mut object = shape_object(&s.shape);
                    if s.session > 0 {
                        object.insert("session".into(), json!(s.session));
                    }
                    object.insert("measured_s".into(), json!(s.measured_s));
                    Item {
                        object,
                        shape: s.shape,
                        measured_s: Some(s.measured_s),
                        session: s.session,
                        attention: None,
                    }
                })
                .collect();
            Ok((items, m.timing()))
        }
        _ => Err(Error::Parse {
            path: path.to_path_buf(),
            message: "expected a list of kernels or a kernel measurement file".into(),
        }),
    }
}

/// Prices every item on `hw`; `compare` adds each measured item's `error` and the per-kind
/// summary.
pub fn price(hw: &Hardware, items: &[Item], timing: Timing, compare: bool) -> Priced {
    price_at_clocks(hw, items, timing, compare, &[])
}

/// [`price`], with a GEMM of session k > 0 priced at `factors[k − 1]` × the profile's clock
/// (the factors `calibrate --fit` gives a file of several sessions; 1 where none is given).
pub fn price_at_clocks(
    hw: &Hardware,
    items: &[Item],
    timing: Timing,
    compare: bool,
    factors: &[f64],
) -> Priced {
    // The profile with each implementation the items name swapped in (a name the profile
    // lacks is refused before pricing, `check_implementations`; here it prices as the fused).
    let mut profiles: Vec<(Option<AttentionKernel>, Hardware)> = vec![(None, hw.clone())];
    for k in items.iter().filter_map(|it| it.attention) {
        if profiles.iter().all(|(x, _)| *x != Some(k)) {
            let mut h = hw.clone();
            let _ = h.kernels.select_attention(k, &hw.name);
            profiles.push((Some(k), h));
        }
    }
    let clocks: Vec<(Option<AttentionKernel>, super::sessions::SessionClocks)> = profiles
        .iter()
        .map(|(k, h)| (*k, super::sessions::SessionClocks::new(h, factors)))
        .collect();
    let mut triples = Vec::new();
    let mut gemms: Vec<(u32, f64)> = Vec::new();
    let kernels = items
        .iter()
        .map(|it| {
            let at = clocks
                .iter()
                .find(|(k, _)| *k == it.attention)
                .map_or(&clocks[0].1, |c| &c.1);
            let cost = CostModel::new(at.of(it.session));
            let (device, predicted, step) = match (&it.shape, it.attention) {
                (KernelShape::Attention(a), Some(AttentionKernel::Unfused)) => {
                    unfused_s(&cost, a, timing)
                }
                _ => {
                    let device = cost.device_s(&it.shape);
                    let predicted = match timing {
                        Timing::Isolated => cost.isolated_s(&it.shape),
                        Timing::Device => device,
                    };
                    (device, predicted, cost.kernel_s(&it.shape))
                }
            };
            let mut o = it.object.clone();
            o.insert("predicted_s".into(), json!(predicted));
            o.insert("device_s".into(), json!(device));
            o.insert("step_s".into(), json!(step));
            if compare {
                if let Some(m) = it.measured_s {
                    o.insert("error".into(), json!(predicted / m - 1.0));
                    triples.push((it.shape.kind(), predicted, m));
                    if it.shape.kind() == KernelKind::Gemm {
                        gemms.push((it.session, predicted / m - 1.0));
                    }
                }
            }
            Value::Object(o)
        })
        .collect();
    Priced {
        timing,
        kernels,
        by_session: session_errors(&gemms, factors),
        by_kind: kind_errors(&triples),
    }
}

/// An unfused attention pass as the schedule issues it (`--no-flash`: its batched GEMMs and
/// softmax passes, `schedule::kernels`), timed as one call would be: (device, predicted, step).
fn unfused_s(cost: &CostModel, a: &Attention, timing: Timing) -> (f64, f64, f64) {
    let ks = crate::schedule::unfused_attention(a);
    let device: f64 = ks.iter().map(|k| cost.device_s(k)).sum();
    let step: f64 = ks.iter().map(|k| cost.kernel_s(k)).sum();
    let host = &cost.hardware().kernels.host;
    let predicted = match timing {
        Timing::Isolated => (step + host.isolated_gap_s.value).max(host.isolated_floor_s.value),
        Timing::Device => device,
    };
    (device, predicted, step)
}

/// A kernel list's entries within the bounds a measurement file's are held to
/// (`super::bounds`): shapes, measured times and rates, and one shape (of one implementation)
/// timed twice within the stated spread.
fn check_list(path: &Path, items: &[Item]) -> Result<()> {
    let mut timed: Vec<(Option<AttentionKernel>, (String, KernelShape, f64))> = Vec::new();
    for (i, it) in items.iter().enumerate() {
        super::bounds::check_shape(&it.shape).map_err(|why| bad(path, format!("[{i}]"), &why))?;
        if let Some(t) = it.measured_s {
            super::bounds::check_time(t)
                .and_then(|()| super::bounds::check_rate(&it.shape, t))
                .map_err(|why| bad(path, format!("[{i}]"), &why))?;
            timed.push((it.attention, (format!("[{i}]"), it.shape, t)));
        }
    }
    let mut implementations: Vec<Option<AttentionKernel>> = timed.iter().map(|t| t.0).collect();
    implementations.sort_unstable();
    implementations.dedup();
    for k in implementations {
        let mine: Vec<_> = timed
            .iter()
            .filter(|t| t.0 == k)
            .map(|t| t.1.clone())
            .collect();
        super::bounds::check_repeats(&mine).map_err(|(field, why)| bad(path, field, &why))?;
    }
    Ok(())
}

/// Every measured time of `items` within `hw`'s peak (`super::bounds::check_against`): an
/// entry faster than the GPU is refused before anything is priced.
pub fn check_measured(hw: &Hardware, items: &[Item], path: &Path) -> Result<()> {
    for (i, it) in items.iter().enumerate() {
        if let Some(t) = it.measured_s {
            super::bounds::check_against(hw, &it.shape, t).map_err(|why| {
                let op = it
                    .object
                    .get("op")
                    .and_then(Value::as_str)
                    .unwrap_or("kernel");
                bad(path, format!("entry {i} ({op})"), &why)
            })?;
        }
    }
    Ok(())
}

/// Refuses an item naming an implementation `hw` lacks: `[i].implementation` and what the
/// profile has; or an FP8 GEMM on a profile without FP8 tensor cores (`[i].dtype`).
pub fn check_implementations(hw: &Hardware, items: &[Item], path: &Path) -> Result<()> {
    for (i, it) in items.iter().enumerate() {
        if let KernelShape::Gemm(g) = it.shape {
            if let Some(why) = hw.refuses(crate::cost::gemm::linear_dtype(g.dtype)) {
                return Err(bad(path, format!("[{i}].dtype"), &why));
            }
        }
        if let Some(k) = it.attention {
            if !hw.kernels.has_attention(k) {
                return Err(bad(
                    path,
                    format!("[{i}].implementation"),
                    &format!(
                        "'{k}' is not in {}'s kernel model; it has: {}",
                        hw.name,
                        hw.kernels.attention_list()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Per session, when the GEMMs are of more than one: their errors.
fn session_errors(gemms: &[(u32, f64)], factors: &[f64]) -> Vec<SessionErrors> {
    let n = gemms.iter().map(|g| g.0).max().unwrap_or(0);
    if n == 0 {
        return Vec::new();
    }
    (0..=n)
        .filter_map(|k| {
            let mut e: Vec<f64> = gemms.iter().filter(|g| g.0 == k).map(|g| g.1).collect();
            if e.is_empty() {
                return None;
            }
            let mut abs: Vec<f64> = e.iter().map(|x| x.abs()).collect();
            let max = abs.iter().copied().fold(0.0, f64::max);
            Some(SessionErrors {
                session: k,
                samples: e.len(),
                rate_factor: match k {
                    0 => 1.0,
                    k => factors.get(k as usize - 1).copied().unwrap_or(1.0),
                },
                median_error: super::fit::median(&mut e),
                median_abs_error: super::fit::median(&mut abs),
                max_abs_error: max,
            })
        })
        .collect()
}
