//! What lowering a plan will build, estimated from the plan alone, before anything is built:
//! the simulator's guard (`config::limits`) refuses a graph too large for the machine from
//! this estimate, and `lower` sizes its task list with it. It must bound what `lower` builds
//! (checked by a debug assertion at the end of `lower` and by the tests below, which also check
//! it is no more than twice the real size), so a change to the lowering changes it too.

use super::devices::{simulated_devices, Devices};
use super::{Stage, StepPlan};
use crate::config::ValidWorkload;
use crate::schedule::stage::{Exchange, PhaseBlock};

/// The size of a lowered graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GraphSize {
    /// Devices laid out (one per distinct program, or every device: `Devices`).
    pub devices: u64,
    /// Devices of the cluster they stand for (p · cp · pp · dp).
    pub cluster_devices: u64,
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
    /// Collectives over a method group (p ranks) per device.
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

/// The size of the graph `lower(w, plan, _, opts)` builds with `opts.devices` (an upper
/// estimate; module docs). Saturates rather than wraps for absurd inputs, so a huge plan reads
/// as huge.
///
/// Every simulated device runs its stage's program: each micro-batch through each of its
/// chunks (a chunk holds at most ⌈layers / (pp · v)⌉ layers, `config::layout`), with the
/// pipeline's sends and receives around each chunk, then the optimizer — so the stage with the
/// most layers bounds every device.
pub fn graph_size(w: &ValidWorkload, plan: &StepPlan, devices: Devices) -> GraphSize {
    let p = w.p;
    let (pp, v) = (w.outer.pp.max(1), w.outer.interleave.max(1));
    let sim = simulated_devices(w, plan, devices);
    // The workload's layers and micro-batches, not the plan's: a shortened copy of a step is
    // lowered with the whole step's plan (`sim::simulate_shortened`).
    let chunk_layers = w.model.layers.div_ceil(pp.saturating_mul(v));
    let layers = chunk_layers.saturating_mul(v);
    let mbs = w.micro_batches;
    let zero3 = u64::from(plan.zero3_gather_bytes > 0);
    let sync = u64::from(plan.layer_grad_sync_bytes > 0);
    // Per layer and micro-batch: the forward and backward blocks, the stored activations'
    // alloc and free, ZeRO-3's two gathers and the gradient synchronisation (counted every
    // micro-batch: under ZeRO ≥ 2 it is).
    let layer = blocks(&plan.layer_fwd, p)
        + blocks(&plan.layer_bwd, p)
        + Count {
            tasks: 3 + 2 * zero3 + sync,
            collectives: 0,
        };
    // Per micro-batch: the layers, the head, the embedding (kernels and stored inputs), and
    // each chunk's four pipeline messages with a margin, and the all-gathers after its two
    // receives where the plan has them.
    let gathers = 2 * v * u64::from(plan.pipeline_gather_bytes > 0 && p > 1);
    let micro_batch = scale(layer, layers)
        + stages(&plan.head.stages, p)
        + Count {
            tasks: (plan.embedding_fwd.len() + plan.embedding_bwd.len()) as u64
                + 8
                + 8 * v
                + gathers,
            collectives: gathers,
        };
    let optimizer = plan.optimizer.iter().map(Vec::len).max().unwrap_or(0) as u64;
    let per_device = scale(micro_batch, mbs)
        + Count {
            tasks: optimizer + 8 + layers * u64::from(plan.first_forward_gather_bytes > 0),
            collectives: 0,
        };
    // Member lists: a method collective holds its p ranks; a gradient synchronisation, a
    // ZeRO-3 gather or the weights' all-gather after a sharded optimizer's step the ranks
    // holding the same weights (every replica and context rank, and
    // every method rank for replicated weights); the tied embedding's all-reduce two.
    let (dp, cp) = (w.dp, w.outer.cp);
    let sync_group = dp
        .saturating_mul(cp)
        .saturating_mul(if plan.grad_sync_over_p { p } else { 1 });
    // After the step: one collective; overlapped: one per layer, in the first forward.
    let param_gather = if plan.first_forward_gather_bytes > 0 {
        layers
    } else {
        u64::from(plan.layer_param_gather_bytes > 0)
    };
    // Gradients are synchronised once per step, or after every micro-batch under ZeRO ≥ 2.
    let sync_rounds = if plan.grad_sync_every_micro_batch {
        mbs
    } else {
        1
    };
    let syncs = layers
        .saturating_mul(sync)
        .saturating_mul(sync_rounds)
        .saturating_add(layers.saturating_mul(mbs).saturating_mul(2 * zero3))
        .saturating_add(param_gather);
    let entries_per_device = per_device
        .collectives
        .saturating_mul(p)
        .saturating_add(syncs.saturating_mul(sync_group))
        .saturating_add(2);
    GraphSize {
        devices: sim,
        cluster_devices: w.devices(),
        tasks: per_device.tasks.saturating_mul(sim),
        group_entries: entries_per_device.saturating_mul(sim),
    }
}

/// One pipeline op's program, as `lower_ops` builds it for one op of a stage: a forward or a
/// backward of `layers` layers, with the embedding and the head where the op runs them and
/// each layer's gradient synchronisation where it synchronises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpProgram {
    /// Forward (else backward).
    pub forward: bool,
    /// Layers the program runs.
    pub layers: u64,
    /// Whether it runs the embedding.
    pub embedding: bool,
    /// Whether it runs the head and the loss.
    pub head: bool,
    /// Whether its backward synchronises each layer's gradients.
    pub sync: bool,
    /// Whether its forward gathers each layer's updated weights one layer ahead (the first
    /// micro-batch's, `config::ParamGather::Overlapped`).
    pub gathers: bool,
}

/// What one op's program runs ([`op_program_size`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProgramSize {
    /// Tasks, on all of the stage's simulated devices.
    pub tasks: u64,
    /// Steps of the collectives over the replicas holding the same weights (ZeRO-3's gathers,
    /// the layers' gradient synchronisations), summed over the stage's simulated devices: each
    /// is a ring of about one step per replica (at most the simulator's coalesced steps), whose
    /// transfers and events a task count does not see.
    pub replica_steps: u64,
}

/// The size of `op`'s program on one stage's simulated devices (tasks counted as
/// [`graph_size`] counts a step's, so also an upper estimate): what a composed simulation of it
/// runs, known before anything is lowered, with a collective over the replicas run as at most
/// `max_steps` steps (the simulator's coalescing, `sim::network`). A planner orders its
/// simulations by it (`sim::composed_size`).
pub fn op_program_size(
    w: &ValidWorkload,
    plan: &StepPlan,
    devices: Devices,
    op: OpProgram,
    max_steps: u64,
) -> ProgramSize {
    let p = w.p;
    let stage_devices = simulated_devices(w, plan, devices) / w.outer.pp.max(1);
    // ZeRO-3's gathers, or the first forward's gathers of the updated weights.
    let zero3 = u64::from(plan.zero3_gather_bytes > 0 || (op.forward && op.gathers));
    let sync = u64::from(op.sync && plan.layer_grad_sync_bytes > 0);
    let (layer, collectives) = if op.forward {
        (blocks(&plan.layer_fwd, p).tasks + 1 + zero3, zero3)
    } else {
        (
            blocks(&plan.layer_bwd, p).tasks + 1 + zero3 + sync,
            zero3 + sync,
        )
    };
    let embedding = if !op.embedding {
        0
    } else if op.forward {
        plan.embedding_fwd.len() as u64
    } else {
        plan.embedding_bwd.len() as u64
    };
    let head = if op.head {
        stages(&plan.head.stages, p).tasks
    } else {
        0
    };
    let replicas = w.dp.saturating_mul(w.outer.cp);
    ProgramSize {
        tasks: layer
            .saturating_mul(op.layers)
            .saturating_add(embedding + head + 2)
            .saturating_mul(stage_devices),
        replica_steps: collectives
            .saturating_mul(op.layers)
            .saturating_mul(replicas.saturating_sub(1).min(max_steps.max(1)))
            .saturating_mul(stage_devices),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{
        load_hardware, load_model, MethodId, Options, OuterAxes, Workload, ZeroStage,
    };
    use crate::schedule::{lower, plan, LowerOptions, Work};

    /// A task is 144 bytes: the per-task figure's base.
    #[test]
    fn a_task_is_144_bytes() {
        assert_eq!(std::mem::size_of::<crate::schedule::Task>(), 144);
    }

    /// The estimate bounds the real graph and is within a factor of two of it, for every method,
    /// with data parallelism, several micro-batches, ZeRO-3, causal rings, METP's chain
    /// exchange, pipelines (plain and interleaved), context parallelism and the reduction to
    /// distinct programs — tasks and collective member entries alike.
    #[test]
    fn the_estimate_bounds_what_is_built() {
        let mut model = load_model("llama2-7b").unwrap();
        model.layers = 8;
        let mut hardware = load_hardware("dgx-a100-80gb").unwrap();
        hardware.nodes = 8;
        type Case = (
            u64,
            u64,
            u64,
            Option<ZeroStage>,
            bool,
            bool,
            (u64, u64, u64),
        );
        let cases: [Case; 7] = [
            (8, 1, 1, None, false, false, (1, 1, 1)),
            (4, 2, 2, Some(ZeroStage::Zero3), true, false, (1, 1, 1)),
            (2, 4, 1, Some(ZeroStage::Zero1), false, true, (1, 1, 1)),
            (8, 4, 3, None, true, true, (1, 1, 1)),
            (2, 2, 4, None, true, false, (4, 1, 1)),
            (2, 1, 4, None, false, false, (2, 2, 1)),
            (2, 2, 2, None, false, false, (2, 1, 2)),
        ];
        for method in MethodId::ALL {
            for (p, dp, mbs, zero, causal, chain, (pp, v, cp)) in cases {
                if cp > 1 && method != MethodId::TpSp {
                    continue;
                }
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
                    outer: OuterAxes {
                        pp,
                        interleave: v,
                        cp,
                    },
                    seq: 4096,
                    micro_batch: 1,
                    micro_batches: mbs,
                    options,
                }
                .validate()
                .unwrap();
                let stages = crate::memory::stage_inventories(&w);
                let plan = plan(&w);
                for devices in [Devices::All, Devices::Distinct] {
                    let est = graph_size(&w, &plan, devices);
                    let g = lower(
                        &w,
                        &plan,
                        &stages,
                        LowerOptions {
                            devices,
                            ..LowerOptions::step()
                        },
                    );
                    let entries: u64 = g
                        .tasks
                        .iter()
                        .map(|t| match &t.work {
                            Work::Collective { group, .. } => group.len() as u64,
                            _ => 0,
                        })
                        .sum();
                    let built = g.tasks.len() as u64;
                    let what = format!(
                        "{method:?} p={p} dp={dp} mbs={mbs} pp={pp} v={v} cp={cp} {devices:?}"
                    );
                    assert!(
                        est.tasks >= built && est.tasks <= 2 * built,
                        "{what}: {est:?} vs {built}"
                    );
                    assert!(
                        est.group_entries >= entries && est.group_entries <= 2 * entries.max(1),
                        "{what}: {est:?} vs {entries} entries"
                    );
                    assert_eq!(est.devices, u64::from(g.devices), "{what}");
                    assert_eq!(est.cluster_devices, p * dp * pp * cp, "{what}");
                }
            }
        }
    }
}
