//! What a pipeline stage holds in flight at each moment of its 1F1B order where its memory may
//! peak: the layers, embedding inputs and head inputs of the micro-batches it has run forward
//! and not yet backward, and whether the moment is a forward (with the loss, on the last
//! virtual stage) or a backward.
//!
//! The moments depend on the order and the stage's chunk sizes only — not on bytes — so a plan
//! that prices one pipeline shape under many methods, recomputation policies and ZeRO stages
//! walks each order once per thread (a bounded cache) instead of once per configuration and
//! stage. A moment already seen is not repeated: the peak rule keeps the earliest of equal
//! totals, so a repeat could never win. Depends on `config` only.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use crate::config::ValidWorkload;

/// Whether a moment is a forward, the last virtual stage's forward (which runs the loss), or a
/// backward (before its first layer frees anything).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Step {
    Forward,
    ForwardWithLoss,
    Backward,
}

/// One moment: what is held, and which step runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Moment {
    pub layers: u64,
    pub embedding: u64,
    pub head: u64,
    pub step: Step,
}

/// Everything the order and the counts depend on.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    pp: u32,
    v: u32,
    m: u32,
    round: Option<u32>,
    stage: u32,
    chunk_layers: Vec<u64>,
    embedding: bool,
    head: bool,
}

/// Distinct orders a thread keeps (a plan meets a few thousand; each is a short list).
const CACHE_ENTRIES: usize = 4096;

thread_local! {
    static CACHE: RefCell<HashMap<Key, Rc<[Moment]>>> = RefCell::new(HashMap::new());
}

/// The distinct moments of stage `stage`'s order, in order of first occurrence (`chunks`: its
/// chunks, `ValidWorkload::stage_chunks`).
pub(super) fn moments(w: &ValidWorkload, stage: u32, chunks: &[(u64, u64)]) -> Rc<[Moment]> {
    let v = w.outer.interleave as u32;
    let key = Key {
        pp: w.outer.pp as u32,
        v,
        m: w.micro_batches as u32,
        round: w
            .options
            .runtime
            .pp_round
            .filter(|_| v > 1)
            .map(|r| r as u32),
        stage,
        chunk_layers: chunks.iter().map(|c| c.1).collect(),
        embedding: w.has_embedding(stage),
        head: w.has_head(stage),
    };
    if let Some(hit) = CACHE.with(|c| c.borrow().get(&key).cloned()) {
        return hit;
    }
    let found = walk(w, &key);
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= CACHE_ENTRIES {
            c.clear();
        }
        c.insert(key, found.clone());
    });
    found
}

/// Walks `w`'s order op by op (no list of it: 2·v·m ops); `k` is what it depends on.
fn walk(w: &ValidWorkload, k: &Key) -> Rc<[Moment]> {
    let last_chunk = k.chunk_layers.len() as u32 - 1;
    let (mut layers, mut embedding, mut head) = (0u64, 0u64, 0u64);
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for i in 0..2 * k.m * k.v {
        let op = w.pipeline_op(k.m, k.stage, i);
        let n = k.chunk_layers[op.chunk as usize];
        let first = k.embedding && op.chunk == 0;
        let last = k.head && op.chunk == last_chunk;
        let step = if op.forward {
            layers += n;
            embedding += u64::from(first);
            head += u64::from(last);
            if last {
                Step::ForwardWithLoss
            } else {
                Step::Forward
            }
        } else {
            Step::Backward
        };
        let moment = Moment {
            layers,
            embedding,
            head,
            step,
        };
        if seen.insert(moment) {
            out.push(moment);
        }
        if !op.forward {
            layers -= n;
            embedding -= u64::from(first);
            head -= u64::from(last);
        }
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::gpt3_tp_sp;
    use crate::config::Options;

    /// The moments are the order's, walked from its list (`pipeline_order`), repeats dropped
    /// — for Megatron's interleaving, LLaMA 3's flexible rounds and uneven stages.
    #[test]
    fn moments_follow_the_listed_order() {
        for (layers, pp, v, m, round) in [
            (32u64, 4u64, 1u64, 8u64, None),
            (30, 4, 2, 8, None),
            (126, 16, 4, 32, Some(16u64)),
        ] {
            let mut options = Options::default();
            options.runtime.pp_round = round;
            let w = gpt3_tp_sp(layers, (pp, v, 1), m, pp, options);
            for s in 0..pp as u32 {
                let chunks = w.stage_chunks(s);
                let (mut l, mut e, mut h) = (0u64, 0u64, 0u64);
                let mut listed = Vec::new();
                for op in w.pipeline_order(s) {
                    let n = chunks[op.chunk as usize].1;
                    let first = w.has_embedding(s) && op.chunk == 0;
                    let last = w.has_head(s) && op.chunk as usize == chunks.len() - 1;
                    if op.forward {
                        (l, e, h) = (l + n, e + u64::from(first), h + u64::from(last));
                    }
                    let step = match (op.forward, last) {
                        (true, true) => Step::ForwardWithLoss,
                        (true, false) => Step::Forward,
                        _ => Step::Backward,
                    };
                    let mo = Moment {
                        layers: l,
                        embedding: e,
                        head: h,
                        step,
                    };
                    if !listed.contains(&mo) {
                        listed.push(mo);
                    }
                    if !op.forward {
                        (l, e, h) = (l - n, e - u64::from(first), h - u64::from(last));
                    }
                }
                let found = moments(&w, s, &chunks);
                assert_eq!(&listed[..], &found[..], "{layers} {pp} {v} {m} {s}");
                // A second call is the cached list.
                assert!(Rc::ptr_eq(&found, &moments(&w, s, &chunks)));
            }
        }
    }
}
