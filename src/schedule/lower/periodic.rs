//! The repeating rounds a lowering declares ([`Periodic`]): from where each op and each layer
//! of a stage started in the graph, the runs of rounds of equal size that the structure of the
//! step repeats — a run of layers (every layer is the same work), or the steady rounds of a
//! pipeline ([`crate::config::steady_rounds`]). Equal size is necessary, not sufficient: the
//! simulator checks that each round is the previous one shifted, task by task, before it relies
//! on a declaration.

use super::{Rounds, StageMarks};
use crate::config::{steady_rounds, ValidWorkload};
use crate::schedule::graph::{Periodic, Segment, TaskId};

/// The longest prefix of `starts` (round starts, then the end of the last round) whose rounds
/// have the size of the first: `(stride, rounds)`.
fn uniform(starts: &[TaskId]) -> (u32, u32) {
    let Some(stride) = starts.windows(2).next().map(|w| w[1] - w[0]) else {
        return (0, 0);
    };
    let rounds = starts
        .windows(2)
        .take_while(|w| w[1] - w[0] == stride)
        .count();
    (stride, rounds as u32)
}

/// The declarations for a graph lowered with `marks` (one entry per stage).
pub(super) fn declare(w: &ValidWorkload, marks: &[StageMarks], rounds: Rounds) -> Vec<Periodic> {
    match rounds {
        Rounds::None => Vec::new(),
        Rounds::Layers => marks
            .iter()
            .flat_map(|stage| &stage.ops)
            .filter_map(|op| {
                let mut starts = op.layers.clone();
                starts.push(op.layers_end);
                let (stride, rounds) = uniform(&starts);
                (stride > 0 && rounds >= 2).then(|| Periodic {
                    segments: vec![Segment {
                        base: starts[0],
                        stride,
                        rounds,
                    }],
                    insert: 0,
                })
            })
            .collect(),
        Rounds::MicroBatches => {
            let (pp, v, m) = (
                w.outer.pp as u32,
                w.outer.interleave as u32,
                w.micro_batches as u32,
            );
            let mut segments = Vec::with_capacity(marks.len());
            for (s, stage) in marks.iter().enumerate() {
                let round = w
                    .options
                    .runtime
                    .pp_round
                    .and_then(|r| u32::try_from(r).ok());
                let steady = steady_rounds(pp, v, m, round, s as u32);
                let op_start = |i: u32| {
                    stage
                        .ops
                        .get(i as usize)
                        .map_or(stage.end, |o: &super::OpMarks| o.start)
                };
                let per = 2 * steady.pairs_per_round;
                let starts: Vec<TaskId> = (0..=steady.rounds)
                    .map(|r| op_start(steady.warmup + r * per))
                    .collect();
                // The last stage's first steady pair runs the first micro-batch's forward,
                // which gathers the updated weights when that is overlapped
                // (`config::ParamGather`): its round is larger, and the rounds after it repeat.
                let (mut base, (mut stride, mut rounds)) = (starts[0], uniform(&starts));
                if rounds < 2 && starts.len() > 2 {
                    let later = uniform(&starts[1..]);
                    if later.1 >= 2 {
                        (base, stride, rounds) = (starts[1], later.0, later.1);
                    }
                }
                if stride == 0 || rounds < 2 {
                    return Vec::new();
                }
                segments.push(Segment {
                    base,
                    stride,
                    rounds,
                });
            }
            vec![Periodic {
                segments,
                insert: 0,
            }]
        }
    }
}
