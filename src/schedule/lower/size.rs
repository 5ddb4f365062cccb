//! What lowering a plan will build, estimated from the plan alone, before anything is built:
//! the simulator's guard (`config::limits`) refuses a graph too large for the machine from
//! this estimate, and `lower` sizes its task list with it. It must bound what `lower` builds
//! (checked by a debug assertion at the end of `lower` and by the tests below, which also check
//! it is no more than twice the real size), so a change to the lowering changes it too.

use super::{LowerOptions, Stage, StepPlan};
use crate::schedule::stage::{Exchange, PhaseBlock};

/// The size of a lowered graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GraphSize {
    /// Devices laid out (p × dp).
    pub devices: u64,
    /// Tasks (at least as many as are built).
    pub tasks: u64,
    /// Entries of the collectives' member lists, summed over their tasks (every collective task
    /// holds its group: a collective over n devices costs n² entries).
    pub group_entries: u64,
}

impl GraphSize {
    /// Bytes the graph itself holds: its tasks (with their dependency lists, about
    /// [`GRAPH_BYTES_PER_TASK`] each) and the collectives' member lists.
    pub fn bytes(&self) -> u64 {
        self.tasks
            .saturating_mul(GRAPH_BYTES_PER_TASK)
            .saturating_add(self.group_entries.saturating_mul(4))
    }
}

/// Bytes per task of a lowered graph: a task is 144 bytes (`size_of::<Task>()`, checked below)
/// plus its dependency list (a few 4-byte ids on the heap, with the allocator's 16-byte minimum
/// and header), rounded up.
pub const GRAPH_BYTES_PER_TASK: u64 = 192;

/// Counts of one run of stages, per device and per replica.
#[derive(Default, Clone, Copy)]
struct Count {
    /// Tasks per device.
    tasks: u64,
    /// Collectives over the p devices of a replica.
    collectives: u64,
}

impl std::ops::Add for Count {
    type Output = Count;
    fn add(self, o: Count) -> Count {
        Count {
            tasks: self.tasks.saturating_add(o.tasks),
            collectives: self.collectives.saturating_add(o.collectives),
        }
    }
}

fn scale(c: Count, k: u64) -> Count {
    Count {
        tasks: c.tasks.saturating_mul(k),
        collectives: c.collectives.saturating_mul(k),
    }
}

fn stages(ss: &[Stage], p: u64) -> Count {
    ss.iter()
        .map(|s| match s {
            Stage::Compute(k) => Count {
                tasks: k.len() as u64,
                collectives: 0,
            },
            Stage::Collective { .. } => Count {
                tasks: 1,
                collectives: u64::from(p > 1),
            },
            Stage::Ring(r) => Count {
                tasks: r
                    .steps
                    .iter()
                    .map(|st| (st.kernels.len() + st.accumulate.len() + 4) as u64)
                    .sum(),
                collectives: 0,
            },
            Stage::Outer(o) => {
                let groups = u64::from(o.groups);
                // Per group: the body, the next group's weights and the gradients' return
                // (a collective each under broadcast exchange, two point-to-point tasks per
                // device under the chain).
                let exchanges = if p > 1 && o.exchange == Exchange::Broadcast {
                    1 + u64::from(o.grad_bytes > 0)
                } else {
                    0
                };
                let per_group = stages(&o.body, p)
                    + Count {
                        tasks: 4,
                        collectives: exchanges,
                    };
                scale(per_group, groups)
                    + Count {
                        tasks: 2,
                        collectives: 0,
                    }
            }
        })
        .fold(Count::default(), |a, b| a + b)
}

fn blocks(bs: &[PhaseBlock], p: u64) -> Count {
    bs.iter()
        .map(|b| {
            stages(&b.stages, p)
                + Count {
                    tasks: 2,
                    collectives: 0,
                }
        })
        .fold(Count::default(), |a, b| a + b)
}

/// The size of the graph `lower(plan, p, _, opts)` builds (an upper estimate; module docs).
/// Saturates rather than wraps for absurd inputs, so a huge plan reads as huge.
pub fn graph_size(plan: &StepPlan, p: u32, opts: LowerOptions) -> GraphSize {
    let (p, dp) = (u64::from(p), u64::from(opts.dp));
    let devices = p.saturating_mul(dp);
    let layers = u64::from(plan.layers);
    let mbs = u64::from(plan.micro_batches);
    // Per device and micro-batch: every layer's forward and backward (plus alloc/free and the
    // data-parallel collectives: 6), the head, the embedding.
    let layer = blocks(&plan.layer_fwd, p)
        + blocks(&plan.layer_bwd, p)
        + Count {
            tasks: 6,
            collectives: 0,
        };
    let step = scale(layer, layers)
        + stages(&plan.head.stages, p)
        + Count {
            tasks: (plan.embedding_fwd.len() + plan.embedding_bwd.len() + 8) as u64,
            collectives: 0,
        };
    let all = scale(step, mbs)
        + Count {
            tasks: plan.optimizer.len() as u64 + 4,
            collectives: 0,
        };
    // Collectives over the p devices of a replica: dp of them, p tasks of p entries each.
    let replica_entries = all
        .collectives
        .saturating_mul(dp)
        .saturating_mul(p.saturating_mul(p));
    // Gradient synchronisation (once per layer) and ZeRO-3 gathers (twice per layer and
    // micro-batch) over the devices that hold the same weights: one group of p·dp, or p groups
    // of dp.
    let sync_entries = if plan.grad_sync_over_p {
        devices.saturating_mul(devices)
    } else {
        p.saturating_mul(dp.saturating_mul(dp))
    };
    let syncs = u64::from(plan.layer_grad_sync_bytes > 0).saturating_mul(layers)
        + u64::from(plan.zero3_gather_bytes > 0).saturating_mul(2 * layers.saturating_mul(mbs));
    GraphSize {
        devices,
        tasks: all.tasks.saturating_mul(devices),
        group_entries: replica_entries.saturating_add(syncs.saturating_mul(sync_entries)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{load_hardware, load_model, MethodId, Options, Workload, ZeroStage};
    use crate::schedule::{lower, plan, Work};

    /// A task is 144 bytes: the per-task figure's base.
    #[test]
    fn a_task_is_144_bytes() {
        assert_eq!(std::mem::size_of::<crate::schedule::Task>(), 144);
    }

    /// The estimate bounds the real graph and is within a factor of two of it, for every method,
    /// with data parallelism, several micro-batches, ZeRO-3, causal rings and METP's chain
    /// exchange — tasks and collective member entries alike.
    #[test]
    fn the_estimate_bounds_what_is_built() {
        let mut model = load_model("llama2-7b").unwrap();
        model.layers = 3;
        let mut hardware = load_hardware("dgx-a100-80gb").unwrap();
        hardware.nodes = 4;
        for method in MethodId::ALL {
            for (p, dp, mbs, zero, causal, chain) in [
                (8, 1, 1, None, false, false),
                (4, 2, 2, Some(ZeroStage::Zero3), true, false),
                (2, 4, 1, Some(ZeroStage::Zero1), false, true),
                (8, 4, 3, None, true, true),
            ] {
                let mut options = Options {
                    zero,
                    causal,
                    ..Options::default()
                };
                if chain {
                    options.metp.weight_exchange = crate::config::WeightExchange::Ring;
                }
                let w = Workload {
                    model: model.clone(),
                    hardware: hardware.clone(),
                    method,
                    p,
                    dp,
                    seq: 4096,
                    micro_batch: 1,
                    micro_batches: mbs,
                    options,
                }
                .validate()
                .unwrap();
                let inv = crate::memory::inventory(&w);
                let plan = plan(&w);
                let opts = LowerOptions {
                    dp: dp as u32,
                    memory: true,
                    optimizer: true,
                };
                let est = graph_size(&plan, p as u32, opts);
                let g = lower(&plan, p as u32, &inv, opts);
                let entries: u64 = g
                    .tasks
                    .iter()
                    .map(|t| match &t.work {
                        Work::Collective { group, .. } => group.len() as u64,
                        _ => 0,
                    })
                    .sum();
                let built = g.tasks.len() as u64;
                let what = format!("{method:?} p={p} dp={dp} mbs={mbs}");
                assert!(
                    est.tasks >= built && est.tasks <= 2 * built,
                    "{what}: {est:?} vs {built}"
                );
                assert!(
                    est.group_entries >= entries && est.group_entries <= 2 * entries.max(1),
                    "{what}: {est:?} vs {entries} entries"
                );
                assert_eq!(est.devices, p * dp);
            }
        }
    }
}
