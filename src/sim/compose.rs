//! A step composed from its distinct programs: each pipeline op — a forward or backward of one
//! model chunk for one micro-batch on one stage — is simulated once per distinct program, and
//! the stages' 1F1B orders are walked with those times. The fast path for steps too large to
//! simulate whole and not shortened exactly (`shorten`): a 16,384-GPU LLaMA 3 405B step at 128k
//! tokens (TP 8, CP 16, PP 16, V 4) is 7 M tasks whole, a few hundred thousand composed.
//!
//! A program is what an op does on its stage's devices — its layers (with the embedding on the
//! first virtual stage, the head and loss on the last), and for a backward of the last
//! micro-batch (of every micro-batch under ZeRO ≥ 2) the gradient synchronisation of each layer, as the lowering builds it
//! ([`schedule::lower_ops`]) — so everything inside an op is simulated: kernels, collectives,
//! rings, link sharing among the op's own flows, compute slowed by its own communication. A
//! program's layers are shortened where the engine proves them periodic (exact); a run that is
//! not proven and too large is extrapolated from two shorter runs (affine in the layers).
//! Stages that sit on nodes alike share their programs.
//!
//! The walk is the analytic twin's (`analytic::pipeline`), with simulated programs in place of
//! closed-form layers: an op starts when its stage is free and its input has arrived; it lasts
//! its program's time on the stage's slowest device; its output leaves when it ends (one
//! message in flight per direction) and takes `α + bytes/B` over the link class the two stages
//! share; gradient synchronisations left in flight after an op's last kernel queue on the
//! stage's asynchronous stream; tied embeddings are all-reduced between the first and the last
//! stage, then each stage runs its optimizer (and all-gathers its updated weights when the
//! optimizer state is sharded below ZeRO-3). What the walk does not see, and so the whole
//! simulation (`--full-sim`) does: pipeline messages sharing links with the ops' own flows and
//! slowing their compute, gradient synchronisations slowing the ops after them, and the devices
//! of a stage starting an op at different instants. Tested against the whole simulation in
//! `tests/it/compose.rs`.

use std::collections::HashMap;

use serde::Serialize;

use super::engine::DeviceStats;
use super::queue::{ps_to_secs, secs_to_ps};
use super::workload::{reserve, workload_sim};
use super::{simulate, LinkModel, SimOptions, SimResult, TraceScope, WorkloadSim};
use crate::config::{limits, Coord, PipeOp, ValidWorkload};
use crate::cost::CostModel;
use crate::error::{Error, Result};
use crate::memory::Inventory;
use crate::schedule::{self, CollectiveOp, Devices, LowerOptions, Rounds, StepPlan};

mod walk;
use walk::{Walker, MAX_WALK_OPS};

/// Tasks a program may have before its layers are shortened by extrapolation when the
/// periodic proof fails.
const PROGRAM_TASKS: u64 = 400_000;

/// What a composed simulation ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Composition {
    /// Distinct programs simulated.
    pub programs: u64,
    /// Ops composed from them.
    pub ops: u64,
    /// Programs whose layers were extrapolated from two shorter runs (not proven periodic).
    pub extrapolated: u64,
}

/// The key of a program: its stage (0 for all when stages are alike), the pass, the chunk's
/// layers, whether it runs the embedding and the head, and whether it synchronises gradients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    stage: u32,
    forward: bool,
    layers: u64,
    embedding: bool,
    head: bool,
    sync: bool,
    /// A first micro-batch's forward that gathers the updated weights one layer ahead
    /// (`config::ParamGather::Overlapped`; lowered alone, it finds its first layer's gathered:
    /// the walk waits for the stage's first).
    gathers: bool,
}

/// One program's outcome on each device of its stage (indexed like the stage's devices).
#[derive(Debug, Clone)]
struct Program {
    /// Per device: (kernels end, finish, compute, communication, exposed to the kernels' end).
    pub(super) devices: Vec<[f64; 5]>,
    tasks: u64,
    events: u64,
    extrapolated: bool,
}

/// Whether stages sit on the nodes alike (each stage's devices fill whole nodes, or every
/// stage is in one node), so that one stage's programs stand for every stage's.
fn stages_alike(w: &ValidWorkload) -> bool {
    let per_stage = w.p * w.outer.cp * w.dp;
    let gpn = w.hardware.gpus_per_node.max(1);
    per_stage.is_multiple_of(gpn) || per_stage * w.outer.pp <= gpn
}

/// The programs of a step's ops ([`Key`]).
struct Keys<'a> {
    w: &'a ValidWorkload,
    plan: &'a StepPlan,
    alike: bool,
    /// Each stage's chunks: (first layer, layers).
    chunks: Vec<Vec<(u64, u64)>>,
}

impl<'a> Keys<'a> {
    fn new(w: &'a ValidWorkload, plan: &'a StepPlan) -> Keys<'a> {
        Keys {
            w,
            plan,
            alike: stages_alike(w),
            chunks: (0..w.outer.pp as u32).map(|s| w.stage_chunks(s)).collect(),
        }
    }

    /// The program of `op` on stage `s` in a step of `m` micro-batches.
    fn of(&self, s: u32, op: &PipeOp, m: u32) -> Key {
        let (w, plan) = (self.w, self.plan);
        Key {
            stage: if self.alike { 0 } else { s },
            forward: op.forward,
            layers: self.chunks[s as usize][op.chunk as usize].1,
            embedding: w.has_embedding(s) && op.chunk == 0,
            head: w.has_head(s) && u64::from(op.chunk) + 1 == w.outer.interleave,
            sync: plan.layer_grad_sync_bytes > 0
                && !op.forward
                && (op.micro_batch + 1 == m || plan.grad_sync_every_micro_batch),
            gathers: op.forward && op.micro_batch == 0 && plan.first_forward_gather_bytes > 0,
        }
    }

    /// Each distinct program once, with the first stage and op that run it, in the order they
    /// are simulated: every chunk's forward of the first micro-batch and of the others (which
    /// differ when the first gathers the updated weights), its backward (with more than one
    /// micro-batch), and its backward of the last micro-batch, stage by stage.
    fn distinct(&self) -> Vec<(u32, PipeOp, Key)> {
        let m = self.w.micro_batches as u32;
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for s in 0..self.w.outer.pp as u32 {
            for chunk in 0..self.w.outer.interleave as u32 {
                for (forward, mb) in [(true, 0), (true, m.min(2) - 1), (false, 0), (false, m - 1)] {
                    let op = PipeOp {
                        forward,
                        micro_batch: mb,
                        chunk,
                    };
                    let k = self.of(s, &op, m);
                    if seen.insert(k) {
                        out.push((s, op, k));
                    }
                }
            }
        }
        out
    }
}

/// The layers a program of `layers` is simulated with: a shortened copy where that may be
/// proven periodic ([`run_program`]).
fn simulated_layers(layers: u64, tail: u64) -> u64 {
    layers.min(super::shorten::short_layers(layers, tail))
}

/// What [`simulate_composed`] will run for `w`, estimated from the plan before anything is
/// lowered (`schedule::op_program_size` of each distinct program, its layers shortened as
/// [`run_program`] shortens them when the proof holds): what its time follows, for a planner
/// ordering its simulations.
pub fn composed_size(
    w: &ValidWorkload,
    plan: &StepPlan,
    devices: Devices,
) -> schedule::ProgramSize {
    Keys::new(w, plan)
        .distinct()
        .iter()
        .map(|(_, _, k)| {
            schedule::op_program_size(
                w,
                plan,
                devices,
                schedule::OpProgram {
                    forward: k.forward,
                    layers: simulated_layers(k.layers, super::shorten::run_tail(w)),
                    embedding: k.embedding,
                    head: k.head,
                    sync: k.sync,
                    gathers: k.gathers,
                },
                u64::from(super::network::COLLECTIVE_STEPS),
            )
        })
        .fold(schedule::ProgramSize::default(), |a, b| {
            schedule::ProgramSize {
                tasks: a.tasks.saturating_add(b.tasks),
                replica_steps: a.replica_steps.saturating_add(b.replica_steps),
            }
        })
}

/// What every program of one step shares.
struct Step<'a> {
    w: &'a ValidWorkload,
    plan: &'a StepPlan,
    stages: &'a [Inventory],
    link: LinkModel,
    devices: Devices,
}

/// Simulates one program: `op` on stage `stage`, whose devices are `members`.
fn run_program(step: &Step<'_>, stage: u32, op: PipeOp, members: &[u32]) -> Result<Program> {
    let Step {
        w,
        plan,
        stages,
        link,
        devices,
    } = *step;
    let lowered = |w: &ValidWorkload, rounds| {
        schedule::lower_ops(
            w,
            plan,
            stages,
            stage,
            &[op],
            LowerOptions {
                devices,
                rounds,
                ..LowerOptions::step()
            },
        )
    };
    let sim = |g: &schedule::TaskGraph, periodic: bool| {
        let _memory = reserve_tasks(w, g.tasks.len() as u64)?;
        simulate(
            g,
            &w.hardware,
            link,
            SimOptions {
                periodic,
                ..SimOptions::default()
            },
        )
    };
    let layers = w.stage_chunks(stage)[op.chunk as usize].1;
    let short = super::shorten::short_layers(layers, super::shorten::run_tail(w));
    let pick = |r: &SimResult| -> Vec<[f64; 5]> {
        members
            .iter()
            .map(|&d| {
                let s: &DeviceStats = &r.devices[d as usize];
                [
                    s.kernels_end_s,
                    s.finish_s,
                    s.compute_busy_s,
                    s.comm_busy_s,
                    s.exposed_to_kernels_end_s,
                ]
            })
            .collect()
    };
    if layers > short {
        // The same op with `n` layers in its chunk (every virtual stage holds n).
        let with_layers = |n: u64| -> Result<ValidWorkload> {
            let mut v = w.clone().into_workload();
            v.model.layers = n * w.outer.pp * w.outer.interleave;
            v.validate()
        };
        let mut g = lowered(&with_layers(short)?, Rounds::Layers);
        // A declared run whose proof fails was simulated as it is (the monitor changes nothing
        // the engine does): the short copy's own step, kept for the affine fit below.
        let mut short_run = None;
        if g.periodic.len() == 1 {
            g.periodic[0].insert = layers - short;
            let r = sim(&g, true)?;
            if r.periodic.first().is_some_and(Option::is_some) {
                return Ok(Program {
                    devices: pick(&r),
                    tasks: r.tasks,
                    events: r.events,
                    extrapolated: false,
                });
            }
            short_run = Some(r);
        }
        // Not proven periodic: the whole run if it is small, else affine in the layers. Every
        // layer lowers to the same tasks, so the short copy's count says how large the whole
        // run is without lowering it (millions of tasks for a long run of a wide ring).
        let whole_tasks = (g.tasks.len() as u64).saturating_mul(layers) / short.max(1);
        drop(g);
        if whole_tasks > PROGRAM_TASKS {
            let (a, b) = (short, 2 * short);
            let ra = match short_run {
                Some(r) => r,
                None => sim(&lowered(&with_layers(a)?, Rounds::None), false)?,
            };
            let rb = sim(&lowered(&with_layers(b)?, Rounds::None), false)?;
            let k = (layers - a) as f64 / (b - a) as f64;
            let (pa, pb) = (pick(&ra), pick(&rb));
            let devices = pa
                .iter()
                .zip(&pb)
                .map(|(x, y)| std::array::from_fn(|i| (x[i] + k * (y[i] - x[i])).max(0.0)))
                .collect();
            return Ok(Program {
                devices,
                tasks: ra.tasks + rb.tasks,
                events: ra.events + rb.events,
                extrapolated: true,
            });
        }
        let r = sim(&lowered(w, Rounds::None), false)?;
        return Ok(Program {
            devices: pick(&r),
            tasks: r.tasks,
            events: r.events,
            extrapolated: false,
        });
    }
    let r = sim(&lowered(w, Rounds::None), false)?;
    Ok(Program {
        devices: pick(&r),
        tasks: r.tasks,
        events: r.events,
        extrapolated: false,
    })
}

/// Per stage, with the updated weights gathered in the first forward
/// (`config::ParamGather::Overlapped`): the chunk whose first forward waits for the stage's
/// first gather, issued at the step's start, and when it arrives. The programs are lowered
/// without it (`schedule::lower::pipeline`: an op alone finds its first layer gathered).
fn first_gathers(
    w: &ValidWorkload,
    plan: &StepPlan,
    cost: &CostModel,
    group: &[u32],
) -> Vec<Option<(u32, f64)>> {
    if plan.first_forward_gather_bytes == 0 {
        return vec![None; w.outer.pp as usize];
    }
    let d = cost.collective_s(
        CollectiveOp::AllGather,
        group,
        plan.first_forward_gather_bytes,
    );
    (0..w.outer.pp as u32)
        .map(|s| {
            let chunks = w.stage_chunks(s);
            let first = chunks.iter().position(|&(_, n)| n > 0)?;
            Some((first as u32, d))
        })
        .collect()
}

/// Sets aside the memory of a program's graph (`workload::reserve`'s rule).
fn reserve_tasks(w: &ValidWorkload, tasks: u64) -> Result<limits::Reservation> {
    let size = schedule::GraphSize {
        devices: 1,
        cluster_devices: 1,
        tasks,
        group_entries: 0,
    };
    reserve(w, &size, TraceScope::Off, None)
}

/// Simulates `w`'s step composed from its distinct programs (module docs).
pub fn simulate_composed(
    w: &ValidWorkload,
    plan: &StepPlan,
    stages: &[Inventory],
    link: LinkModel,
    devices: Devices,
) -> Result<WorkloadSim> {
    // The walk is Megatron's default order with asynchronous exchanges and overlapped
    // synchronisation; another schedule (`config::runtime`) would be priced as that one. What
    // the other options change happens inside an op's program.
    if !w.options.runtime.composable() {
        return Err(Error::InvalidConfig {
            method: w.method.id().to_string(),
            p: w.p,
            message: "a composed simulation walks the default schedule only: a step with other \
                      schedule options (--pp-round, --pp-p2p, --grad-sync, --cp-comm) is \
                      simulated exactly"
                .to_string(),
        });
    }
    let pp = w.outer.pp as u32;
    let v = w.outer.interleave;
    let m = w.micro_batches as u32;
    let cost = CostModel::new(&w.hardware);
    // The layout: every simulated device, by stage.
    let layout = schedule::lower_ops(
        w,
        plan,
        stages,
        0,
        &[],
        LowerOptions {
            devices,
            ..LowerOptions::step()
        },
    );
    let axes = w.axes();
    let coords: Vec<Coord> = (0..layout.devices)
        .map(|d| axes.coord_of(layout.rank_of(d)))
        .collect();
    let by_stage: Vec<Vec<u32>> = (0..pp)
        .map(|s| {
            (0..layout.devices)
                .filter(|&d| coords[d as usize].stage == s)
                .collect()
        })
        .collect();
    let rank = |s: u32| {
        w.rank_of(Coord {
            replica: 0,
            stage: s,
            cp: 0,
            rank: 0,
        })
    };
    let keys = Keys::new(w, plan);
    let key_of = |s: u32, op: &PipeOp, m: u32| keys.of(s, op, m);
    let step = Step {
        w,
        plan,
        stages,
        link,
        devices,
    };
    // Each program once, on the first stage that runs it: every chunk's forward, its backward
    // (with more than one micro-batch), and its backward of the last micro-batch.
    let mut programs: HashMap<Key, Program> = HashMap::new();
    let mut composition = Composition {
        programs: 0,
        ops: 2 * u64::from(m) * v * u64::from(pp),
        extrapolated: 0,
    };
    let (mut tasks, mut events) = (0u64, 0u64);
    for (s, op, k) in keys.distinct() {
        let prog = run_program(&step, s, op, &by_stage[s as usize])?;
        composition.programs += 1;
        composition.extrapolated += u64::from(prog.extrapolated);
        tasks = tasks.saturating_add(prog.tasks);
        events = events.saturating_add(prog.events);
        programs.insert(k, prog);
    }
    let msg = |a: u32, b: u32| cost.message_s(rank(a), rank(b), plan.pipeline_bytes as f64);
    // The devices holding the same weights: the updated weights' all-gathers, in the first
    // forward or after the optimizer.
    let gather_group = w.widest_replica_group(plan.grad_sync_over_p);
    let walker = Walker {
        pp,
        v: v as u32,
        sigma: cost.overlap_slowdown(),
        devices: by_stage.iter().map(Vec::len).collect(),
        program: &|s, op, m| &programs[&key_of(s, op, m)],
        message: &msg,
        first_gather: first_gathers(w, plan, &cost, &gather_group),
        gather: if plan.pipeline_gather_bytes > 0 && w.p > 1 {
            cost.collective_s(
                CollectiveOp::AllGather,
                &(0..w.p as u32).collect::<Vec<_>>(),
                plan.pipeline_gather_bytes,
            )
        } else {
            0.0
        },
    };
    // A long step is walked twice, shorter, and extrapolated along its steady rounds (see
    // `analytic::pipeline`, which prices the same walk in closed form).
    let period = if v > 1 { pp } else { 1 };
    let m1 = (8 * pp * v as u32).div_ceil(period) * period;
    let mut clocks = if composition.ops <= MAX_WALK_OPS || m <= m1 + period {
        walker.walk(m)?
    } else {
        let a = walker.walk(m1)?;
        let b = walker.walk(m1 + period)?;
        let k = f64::from(m - m1) / f64::from(period);
        a.into_iter().zip(b).map(|(a, b)| a.toward(&b, k)).collect()
    };
    // Synchronisations left in flight, the embedding group, the optimizer.
    let mut ends: Vec<f64> = clocks.iter().map(|c| c.t.max(c.queue_end)).collect();
    for c in clocks.iter_mut() {
        let left = (c.queue_end - c.t).max(0.0);
        c.exposed.iter_mut().for_each(|x| *x += left);
    }
    if plan.embedding_sync_bytes > 0 && pp > 1 {
        let (a, b) = (0usize, pp as usize - 1);
        let d = cost.collective_s(
            CollectiveOp::AllReduce,
            &[rank(0), rank(pp - 1)],
            plan.embedding_sync_bytes,
        );
        let start = ends[a].max(ends[b]);
        for s in [a, b] {
            let c = &mut clocks[s];
            for x in 0..c.comm.len() {
                c.comm[x] += d;
                c.exposed[x] += d;
            }
            ends[s] = start + d;
        }
    }
    for (s, c) in clocks.iter_mut().enumerate() {
        let opt: f64 = plan
            .optimizer
            .get(s)
            .or(plan.optimizer.last())
            .map_or(0.0, |ks| ks.iter().map(|k| cost.kernel_s(&k.shape)).sum());
        c.compute.iter_mut().for_each(|x| *x += opt);
        ends[s] += opt;
        // A sharded optimizer state below ZeRO-3 all-gathers the stage's updated weights,
        // waited for by every device (priced as the analytic twin prices it).
        let bytes = plan.param_gather_bytes.get(s).copied().unwrap_or(0);
        if bytes > 0 {
            let d = cost.collective_s(CollectiveOp::AllGather, &gather_group, bytes);
            for x in 0..c.comm.len() {
                c.comm[x] += d;
                c.exposed[x] += d;
            }
            ends[s] += d;
        }
    }
    let step = ends.iter().copied().fold(0.0, f64::max);
    if secs_to_ps(step) >= limits::MAX_SIM_PS || !step.is_finite() {
        return Err(Error::TooLarge {
            message: format!(
                "the composed step would last {step:.3e} s or more, beyond the simulator's clock \
                 (2^62 ps, about 53 days); shorten the sequence or use more devices"
            ),
        });
    }
    let mut device_stats = vec![None; layout.devices as usize];
    for s in 0..pp {
        let c = &clocks[s as usize];
        let peak = stages[s as usize].peak_bytes;
        for (i, &d) in by_stage[s as usize].iter().enumerate() {
            device_stats[d as usize] = Some(DeviceStats {
                compute_busy_s: c.compute[i],
                comm_busy_s: c.comm[i],
                exposed_comm_s: c.exposed[i],
                memory_high_water_bytes: peak,
                finish_s: ends[s as usize],
                kernels_end_s: ends[s as usize],
                exposed_to_kernels_end_s: c.exposed[i],
            });
        }
    }
    let result = SimResult {
        step_time_s: ps_to_secs(secs_to_ps(step)),
        makespan_ps: secs_to_ps(step),
        devices: device_stats
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect(),
        events,
        tasks,
        trace: None,
        periodic: Vec::new(),
    };
    let mut out = workload_sim(w, &layout, result, None, None);
    out.composed = Some(composition);
    Ok(out)
}
