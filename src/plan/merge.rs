//! Merge: the parts of a plan joined into the plan one run gives (module docs of `rank`).

use std::collections::BTreeMap;

use super::rank::*;
use super::{Comparison, PlanSpec};
use crate::error::{Error, Result};
use crate::sim::LinkModel;

/// Joins the parts of a plan (all N of them, in part order) into the plan one run would have
/// given (module docs); no simulation. Parts that disagree on the counts or the pool, or do not
/// simulate every pooled candidate exactly once, are refused in one line.
pub fn merge(spec: &PlanSpec, parts: Vec<PlanPart>) -> Result<Plan> {
    let hw = plan_hardware(spec);
    let mut parts = parts.into_iter();
    let Some(first) = parts.next() else {
        return Err(Error::Merge {
            message: "no parts to merge".into(),
        });
    };
    let (evaluated, equivalent_skipped, n_feasible) =
        (first.evaluated, first.equivalent_skipped, first.feasible);
    let pool = first.pool.clone();
    let mut rejected = first.rejected;
    let mut simulated = first.simulated;
    for (k, part) in parts.enumerate() {
        if (part.evaluated, part.equivalent_skipped, part.feasible)
            != (evaluated, equivalent_skipped, n_feasible)
            || part.pool != pool
        {
            return Err(Error::Merge {
                message: format!(
                    "part {} found other candidates than part 0 (evaluated {} vs {}, feasible                      {} vs {}, or another pool): not parts of one plan",
                    k + 1,
                    part.evaluated,
                    evaluated,
                    part.feasible,
                    n_feasible
                ),
            });
        }
        rejected.extend(part.rejected);
        simulated.extend(part.simulated);
    }
    let mut got: Vec<_> = simulated.iter().map(|s| s.candidate.key()).collect();
    got.sort();
    let mut want: Vec<_> = pool.iter().map(|c| c.key()).collect();
    want.sort();
    if got != want {
        return Err(Error::Merge {
            message: format!(
                "the parts simulated {} configurations, but the plan's best by the closed form                  are {} others or in another number",
                got.len(),
                want.len()
            ),
        });
    }
    let mut ranked = Vec::new();
    for s in simulated {
        match s.outcome {
            Ok(r) => ranked.push(r),
            Err(r) => rejected.push(r),
        }
    }
    let n_simulated = ranked.len();
    let simulated_composed = ranked
        .iter()
        .filter(|r| r.simulation == Simulation::Composed)
        .count();
    ranked.sort_by(|a, b| {
        b.tokens_per_s
            .total_cmp(&a.tokens_per_s)
            .then_with(|| a.candidate.key().cmp(&b.candidate.key()))
    });
    ranked.truncate(spec.top);
    for (i, r) in ranked.iter_mut().enumerate() {
        r.rank = i + 1;
    }
    rejected.sort_by_key(|r| r.sort_key());
    let mut by_reason = BTreeMap::new();
    for r in &rejected {
        *by_reason.entry(r.category.name()).or_insert(0) += 1;
    }
    let message = if n_feasible == 0 {
        Some(format!(
            "no configuration of {} fits {} GPU(s) of {} at s = {}: all {} rejected (reasons \
             below); try more GPUs or a shorter sequence",
            spec.model.name,
            spec.gpus,
            hw.name,
            spec.seq,
            rejected.len()
        ))
    } else if ranked.is_empty() {
        Some("every simulated configuration failed in the simulator (reasons below)".into())
    } else {
        None
    };
    let comparison = match ranked.as_slice() {
        [best, next, ..] => Some(Comparison::of(best, next)),
        _ => None,
    };
    let message = message.or_else(|| {
        (evaluated == 0 && !spec.constraints.describe().is_empty()).then(|| {
            format!(
                "no configuration has {}: the fixed axes leave nothing to evaluate",
                spec.constraints.describe()
            )
        })
    });
    let attention = spec.options.attention_kernel(&hw);
    Ok(Plan {
        model: spec.model.name.clone(),
        hardware: hw.name.clone(),
        attention_kernel: attention.id(),
        kernel_placeholder: hw.kernels.placeholder_note(attention),
        gemm_step_clock_fraction: hw
            .kernels
            .gemm
            .step_clock_fraction
            .as_ref()
            .map(|f| f.value),
        fleet_clock_spread: hw.kernels.gemm.fleet_clock_spread.as_ref().map(|f| f.value),
        grad_dtype: spec.options.grad_dtype.id(),
        optimizer_dtype: spec.options.optimizer_dtype.id(),
        grad_accumulation: spec.options.grad_accumulation.id(),
        tp_comm_overlap: spec.options.tp_comm_overlap,
        shown: spec.options.shown(),
        gpus: spec.gpus,
        nodes: hw.nodes,
        gpus_per_node: hw.gpus_per_node,
        seq: spec.seq,
        global_batch: spec.global_batch_or_default(),
        global_batch_default: spec.global_batch.is_none(),
        constraints: spec.constraints.describe(),
        tokens: spec.tokens,
        gpu_hour_price: spec.gpu_hour_price,
        methods: spec.methods.clone(),
        causal: spec.options.causal,
        link_model: match spec.link_model {
            LinkModel::Ideal => "ideal",
            LinkModel::MaxMin => "maxmin",
        },
        sim_depth: spec.sim_depth,
        sim_layers: vec![spec.model.layers],
        simulated_exact: n_simulated - simulated_composed,
        simulated_composed,
        comparison,
        evaluated,
        equivalent_skipped,
        feasible: n_feasible,
        simulated: n_simulated,
        ranked,
        rejected_total: rejected.len(),
        rejected_by_reason: by_reason,
        rejected,
        rejected_omitted: 0,
        message,
    })
}
