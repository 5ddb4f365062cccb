//! What-if scaling of a hardware profile (`--scale KEY=FACTOR`): multiplies a link or compute
//! figure when the profile is loaded, so a hardware question ("half the NVLink bandwidth?",
//! "twice the FLOPs?") needs no hand-edited file. The change is recorded where every output
//! shows it: the profile's name gains `(--scale KEY=FACTOR, …)` and each scaled figure's
//! `source` says what it was and by what it was multiplied.
//!
//! A key is a short name ([`ALIASES`]: `flops`, `hbm`, `memory`, `nvlink` …) or the dotted
//! path of any figure in the profile (`kernels.gemm.mma_fraction`, `gpu.sm_count`,
//! `inter_node.latency_s`). The scaled profile is validated again, so a factor that makes a
//! figure impossible (an `mma_fraction` above 1) is refused with the field's name.

use std::path::Path;

use serde_json::Value;

use super::Hardware;
use crate::error::{Error, Result};

/// One `KEY=FACTOR`.
#[derive(Debug, Clone, PartialEq)]
pub struct Scale {
    /// The key as written.
    pub key: String,
    /// The factor (positive, finite).
    pub factor: f64,
}

/// Short names and the figures they scale. `spine` scales the spine's bandwidth, i.e. divides
/// its oversubscription.
pub const ALIASES: &[(&str, &[&str])] = &[
    // Both tensor-core peaks where the profile has an FP8 one: a faster GPU in a what-if is
    // faster in FP8 too.
    (
        "flops",
        &["gpu.peak_bf16_flops_per_s", "gpu.peak_fp8_flops_per_s"],
    ),
    ("hbm", &["gpu.hbm_bytes_per_s"]),
    ("memory", &["gpu.memory_bytes"]),
    (
        "intra",
        &[
            "intra_node.bytes_per_s_per_direction",
            "intra_node.link_bytes_per_s_per_direction",
            "collective_library.nvls.bus_bytes_per_s",
            "collective_library.nvls.port_bytes_per_s",
            "collective_library.p2p_bytes_per_s",
            "collective_library.p2p_channels.bytes_per_s_per_channel",
        ],
    ),
    (
        "intra-latency",
        &[
            "intra_node.p2p_latency_s",
            "intra_node.collective_latency_s",
            "collective_library.protocols.ll.intra_step_latency_s",
            "collective_library.protocols.ll128.intra_step_latency_s",
            "collective_library.protocols.simple.intra_step_latency_s",
            "collective_library.nvls.latency_s",
        ],
    ),
    ("inter", &["inter_node.bytes_per_s_per_nic"]),
    (
        "inter-latency",
        &[
            "inter_node.latency_s",
            "collective_library.protocols.ll.inter_step_latency_s",
            "collective_library.protocols.ll128.inter_step_latency_s",
            "collective_library.protocols.simple.inter_step_latency_s",
        ],
    ),
    ("spine", &["inter_node.spine.oversubscription"]),
    ("host", &["kernels.host.op_s"]),
];

/// Other names of the aliases (what people call the links).
const SYNONYMS: &[(&str, &str)] = &[
    ("nvlink", "intra"),
    ("xgmi", "intra"),
    ("pcie", "intra"),
    ("ib", "inter"),
    ("nic", "inter"),
    ("network", "inter"),
];

/// Parses `--scale` values: each `KEY=FACTOR`, several separated by commas.
pub fn parse_scales(values: &[String]) -> Result<Vec<Scale>> {
    let mut out = Vec::new();
    for item in values.iter().flat_map(|v| v.split(',')) {
        let item = item.trim();
        let Some((key, factor)) = item.split_once('=') else {
            return Err(Error::arg(
                "--scale",
                format!("'{item}': expected KEY=FACTOR, e.g. nvlink=0.5 or flops=2"),
            ));
        };
        let factor: f64 = factor.trim().parse().map_err(|_| {
            Error::arg(
                "--scale",
                format!("'{item}': the factor '{factor}' is not a number"),
            )
        })?;
        if !(factor.is_finite() && factor > 0.0 && factor <= 1e6) {
            return Err(Error::arg(
                "--scale",
                format!("'{item}': the factor must be positive and at most 10^6"),
            ));
        }
        out.push(Scale {
            key: key.trim().to_string(),
            factor,
        });
    }
    Ok(out)
}

/// The figures a key scales: its alias's list, or the key itself as a dotted path.
fn figures_of(key: &str) -> (Vec<&str>, bool) {
    let key = SYNONYMS
        .iter()
        .find(|(s, _)| *s == key)
        .map_or(key, |(_, k)| *k);
    match ALIASES.iter().find(|(a, _)| *a == key) {
        Some((_, paths)) => (paths.to_vec(), true),
        None => (vec![key], false),
    }
}

/// Applies `scales` to `hw` in order, records them in its name and sources, and validates the
/// result.
pub fn apply_scales(hw: &mut Hardware, scales: &[Scale]) -> Result<()> {
    if scales.is_empty() {
        return Ok(());
    }
    let mut v = serde_json::to_value(&*hw).map_err(|e| Error::arg("--scale", e.to_string()))?;
    for s in scales {
        let (paths, alias) = figures_of(&s.key);
        let mut found = 0;
        for path in paths {
            let Some(fig) = path
                .split('.')
                .try_fold(&mut v, |node, part| node.get_mut(part))
            else {
                continue;
            };
            let (Some(old), true) = (fig.get("value").and_then(Value::as_f64), fig.is_object())
            else {
                continue;
            };
            // The spine's bandwidth scales as 1 / oversubscription.
            let spine = path.ends_with("oversubscription");
            let mut new = if spine {
                old / s.factor
            } else {
                old * s.factor
            };
            if path == "gpu.memory_bytes" || path == "gpu.sm_count" {
                new = new.round().max(1.0);
            }
            let what = if spine {
                "bandwidth scaled (oversubscription divided)"
            } else {
                "scaled"
            };
            fig["value"] = Value::from(new);
            let source = fig.get("source").and_then(Value::as_str).unwrap_or("");
            fig["source"] = Value::from(format!(
                "{source} — {what} ×{} by --scale {}={} (profile value {old})",
                s.factor, s.key, s.factor
            ));
            found += 1;
        }
        if found == 0 {
            let names: Vec<&str> = ALIASES
                .iter()
                .map(|(a, _)| *a)
                .chain(SYNONYMS.iter().map(|(s, _)| *s))
                .collect();
            return Err(Error::arg(
                "--scale",
                if alias {
                    format!("'{}': this profile has no such figure", s.key)
                } else {
                    format!(
                        "'{}' names no figure of the profile: use one of {} or a dotted \
                         path such as gpu.hbm_bytes_per_s",
                        s.key,
                        names.join(", ")
                    )
                },
            ));
        }
    }
    let name = format!(
        "{} (--scale {})",
        hw.name,
        scales
            .iter()
            .map(|s| format!("{}={}", s.key, s.factor))
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut scaled: Hardware =
        serde_json::from_value(v).map_err(|e| Error::arg("--scale", e.to_string()))?;
    scaled.name = name;
    scaled.validate(Path::new("--scale"))?;
    *hw = scaled;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_hardware;

    fn scaled(hw: &str, spec: &str) -> Result<Hardware> {
        let mut h = load_hardware(hw).unwrap();
        apply_scales(&mut h, &parse_scales(&[spec.to_string()])?)?;
        Ok(h)
    }

    #[test]
    fn aliases_and_paths_scale_their_figures_and_are_recorded() {
        let base = load_hardware("dgx-h100").unwrap();
        let h = scaled("dgx-h100", "nvlink=0.5,flops=2").unwrap();
        assert_eq!(
            h.intra_node.bytes_per_s_per_direction.value,
            base.intra_node.bytes_per_s_per_direction.value * 0.5
        );
        assert_eq!(
            h.gpu.peak_bf16_flops_per_s.value,
            base.gpu.peak_bf16_flops_per_s.value * 2.0
        );
        let fp8 = |h: &Hardware| h.gpu.peak_fp8_flops_per_s.as_ref().unwrap().value;
        assert_eq!(fp8(&h), fp8(&base) * 2.0);
        // A profile without an FP8 peak scales its bf16 one and gains none.
        let a100 = scaled("dgx-a100-80gb", "flops=2").unwrap();
        assert!(a100.gpu.peak_fp8_flops_per_s.is_none());
        assert_eq!(h.name, "dgx-h100 (--scale nvlink=0.5,flops=2)");
        assert!(h
            .gpu
            .peak_bf16_flops_per_s
            .source
            .contains("--scale flops=2"));
        // Untouched figures keep value and source.
        assert_eq!(h.gpu.hbm_bytes_per_s, base.gpu.hbm_bytes_per_s);
        let h = scaled("dgx-h100", "kernels.gemm.tile_s=3").unwrap();
        assert_eq!(
            h.kernels.gemm.tile_s.value,
            base.kernels.gemm.tile_s.value * 3.0
        );
        // Memory stays a whole number of bytes.
        let h = scaled("dgx-h100", "memory=0.3").unwrap();
        assert_eq!(h.gpu.memory_bytes.value.fract(), 0.0);
    }

    #[test]
    fn bad_scales_are_one_clear_line() {
        for (spec, needle) in [
            ("nvlink", "expected KEY=FACTOR"),
            ("nvlink=x", "is not a number"),
            ("nvlink=-1", "must be positive"),
            ("warp=2", "names no figure"),
            ("spine=2", "no such figure"),
            // An mma_fraction above 1 is refused by the profile's own validation.
            (
                "kernels.gemm.mma_fraction=2",
                "kernels.gemm.mma_fraction.value",
            ),
        ] {
            let e = scaled("dgx-h100", spec).unwrap_err().to_string();
            assert!(e.contains(needle), "{spec}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
