//! The configurations a run tries that the tool cannot run, grouped by the reason it gives.
//!
//! The product of a run's tried values holds many combinations the tool refuses for one
//! reason (an interleave of 1 with a per-round count, a micro-batch the global batch does not
//! divide): Llama 3's rows tried 256 configurations, 192 of them refused for three reasons. A
//! report names each reason once, with the knob values its configurations share, instead of a
//! row per configuration; `runs.json` keeps every configuration. Depends on `runs::knobs` and
//! the parent's [`Configuration`] only.

use serde::Serialize;

use super::knobs::Knob;
use super::Configuration;

/// Configurations refused for one reason.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InvalidGroup {
    /// The tool's reason, as it gives it.
    pub reason: String,
    /// How many configurations it refuses for it.
    pub count: usize,
    /// The knobs whose tried values the group does not span, each with the values it holds
    /// (in the order the run file tries them); a knob the group holds at every value is left
    /// out.
    pub only: Vec<KnobValues>,
}

/// Some values of one knob.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KnobValues {
    /// The knob's name.
    pub knob: &'static str,
    /// Its values.
    pub values: Vec<String>,
}

impl InvalidGroup {
    /// `64 configurations with interleave = 1, micro-batch = 2, 4 or 8`.
    pub fn describe(&self) -> String {
        let what = format!(
            "{} configuration{}",
            self.count,
            if self.count == 1 { "" } else { "s" }
        );
        if self.only.is_empty() {
            return format!("{what}, every value tried");
        }
        let knobs: Vec<String> = self
            .only
            .iter()
            .map(|kv| format!("{} = {}", kv.knob, either(&kv.values)))
            .collect();
        format!("{what} with {}", knobs.join(", "))
    }
}

/// `a`, `a or b`, `a, b or c`.
fn either(values: &[String]) -> String {
    match values {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// The refused configurations of `configs`, one group per reason in the order the reasons
/// first appear; `knobs` are the run's unstated knobs with the values it tries, as text (the
/// order the groups name values in).
pub fn group(configs: &[Configuration], knobs: &[(Knob, Vec<String>)]) -> Vec<InvalidGroup> {
    // Every value each knob takes over all the configurations.
    let all: Vec<Vec<String>> = knobs
        .iter()
        .map(|(k, _)| distinct(configs.iter().map(|c| c.knobs.value_text(*k))))
        .collect();
    let mut reasons: Vec<&str> = Vec::new();
    for c in configs {
        if let Some(r) = c.invalid.as_deref() {
            if !reasons.contains(&r) {
                reasons.push(r);
            }
        }
    }
    reasons
        .into_iter()
        .map(|reason| {
            let members: Vec<&Configuration> = configs
                .iter()
                .filter(|c| c.invalid.as_deref() == Some(reason))
                .collect();
            let only = knobs
                .iter()
                .zip(&all)
                .filter_map(|((k, tried), every)| {
                    let held = distinct(members.iter().map(|c| c.knobs.value_text(*k)));
                    (held.len() < every.len()).then(|| {
                        // In the order tried; a value the tried list spells otherwise last.
                        let mut values: Vec<String> =
                            tried.iter().filter(|v| held.contains(v)).cloned().collect();
                        values.extend(held.iter().filter(|v| !tried.contains(v)).cloned());
                        KnobValues {
                            knob: k.id(),
                            values,
                        }
                    })
                })
                .collect();
            InvalidGroup {
                reason: reason.to_string(),
                count: members.len(),
                only,
            }
        })
        .collect()
}

/// The distinct items of `it`, in first-seen order.
fn distinct(it: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for v in it {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AttentionKernel, GradDtype, LayerOps, Recompute};
    use crate::runs::knobs::Knobs;

    fn config(interleave: u64, micro_batch: u64, invalid: Option<&str>) -> Configuration {
        Configuration {
            knobs: Knobs {
                interleave,
                micro_batch,
                recompute: Recompute::None,
                zero: 1,
                attention_kernel: AttentionKernel::Fa2,
                grad_dtype: GradDtype::Bf16,
                flop_attention: None,
                pp_round: None,
                layer_ops: LayerOps::Fused,
            },
            label: String::new(),
            invalid: invalid.map(str::to_string),
            step_time_s: None,
            predicted: None,
            error: None,
            peak_bytes: None,
            fits: None,
        }
    }

    fn texts(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn each_reason_is_one_group_naming_the_values_it_holds() {
        // interleave 1, 2, 4 × micro-batch 1, 2: interleave 1 refused for one reason at
        // both micro-batches, micro-batch 2 for another at interleave 2 and 4.
        let configs = vec![
            config(2, 1, None),
            config(1, 1, Some("a")),
            config(4, 1, None),
            config(2, 2, Some("b")),
            config(1, 2, Some("a")),
            config(4, 2, Some("b")),
        ];
        let g = group(
            &configs,
            &[
                (Knob::Interleave, texts(&["1", "2", "4"])),
                (Knob::MicroBatch, texts(&["1", "2"])),
            ],
        );
        assert_eq!(g.len(), 2);
        assert_eq!((g[0].reason.as_str(), g[0].count), ("a", 2));
        assert_eq!(g[0].describe(), "2 configurations with interleave = 1");
        assert_eq!((g[1].reason.as_str(), g[1].count), ("b", 2));
        assert_eq!(
            g[1].describe(),
            "2 configurations with interleave = 2 or 4, micro-batch = 2"
        );
        // The values are named in the order tried, not the order met (the run's own, 2,
        // comes first among the configurations).
        let g = group(
            &configs,
            &[
                (Knob::Interleave, texts(&["4", "2", "1"])),
                (Knob::MicroBatch, texts(&["1", "2"])),
            ],
        );
        assert_eq!(
            g[1].describe(),
            "2 configurations with interleave = 4 or 2, micro-batch = 2"
        );
        assert_eq!(either(&texts(&["1", "2", "4"])), "1, 2 or 4");
        // Every refused configuration is in exactly one group.
        let refused = configs.iter().filter(|c| c.invalid.is_some()).count();
        assert_eq!(g.iter().map(|x| x.count).sum::<usize>(), refused);
    }

    #[test]
    fn a_reason_that_spans_every_value_names_none_and_valid_runs_make_no_group() {
        let configs = vec![config(1, 1, Some("a")), config(2, 1, Some("a"))];
        let knobs = [(Knob::Interleave, texts(&["1", "2"]))];
        let g = group(&configs, &knobs);
        assert_eq!(g[0].describe(), "2 configurations, every value tried");
        let configs = vec![config(1, 1, None), config(2, 1, None)];
        assert!(group(&configs, &knobs).is_empty());
    }
}
