//! What a pipeline stage holds in flight at each moment of its 1F1B order where its memory may
//! peak: the layers, embedding inputs and head inputs of the micro-batches it has run forward
//! and not yet backward, whether the moment is a forward (with the loss, on the last
//! virtual stage) or a backward, and — where gradients are allocated lazily
//! (`config::GradBuffer::Lazy`) — the layers (and embedding, head) of the model chunks whose
//! gradients are held: from the chunk's first backward of the step, included, to its last,
//! included (whole gradients), or to the step's end (shards; `params::GradLifetime`).
//!
//! The moments depend on the order and the stage's chunk sizes only — not on bytes — so a plan
//! that prices one pipeline shape under many methods, recomputation policies and ZeRO stages
//! walks each order once per thread (a bounded cache) instead of once per configuration and
//! stage. A moment already seen is not repeated: the peak rule keeps the earliest of equal
//! totals, so a repeat could never win. Depends on `config`, and on `params` for the
//! gradients' lifetime.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use super::params::GradLifetime;
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
    /// Layers whose gradients are held (0 unless lazily allocated).
    pub grad_layers: u64,
    /// Whether the embedding's gradients are held (lazily allocated, chunk 0 of the first stage).
    pub grad_embedding: bool,
    /// Whether the head's gradients are held (lazily allocated, the last stage's last chunk).
    pub grad_head: bool,
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
    grads: Option<GradLifetime>,
}

/// Distinct orders a thread keeps (a plan meets a few thousand; each is a short list).
const CACHE_ENTRIES: usize = 4096;

thread_local! {
    static CACHE: RefCell<HashMap<Key, Rc<[Moment]>>> = RefCell::new(HashMap::new());
}

/// The distinct moments of stage `stage`'s order, in order of first occurrence (`chunks`: its
/// chunks, `ValidWorkload::stage_chunks`; `grads`: how long lazily allocated gradients are
/// held, `None`: not counted, always none).
pub(super) fn moments(
    w: &ValidWorkload,
    stage: u32,
    chunks: &[(u64, u64)],
    grads: Option<GradLifetime>,
) -> Rc<[Moment]> {
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
        grads,
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
    // Backwards each chunk has run; its gradients are held from its first to its m-th.
    let mut backwards = vec![0u32; k.chunk_layers.len()];
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for i in 0..2 * k.m * k.v {
        let op = w.pipeline_op(k.m, k.stage, i);
        let n = k.chunk_layers[op.chunk as usize];
        let first = k.embedding && op.chunk == 0;
        let last = k.head && op.chunk == last_chunk;
        if !op.forward {
            backwards[op.chunk as usize] += 1;
        }
        // A chunk's gradients are held from its first backward on: whole ones until its last
        // backward has ended (that one included), shards to the step's end.
        let running = |c: usize| !op.forward && c == op.chunk as usize;
        let held = |c: usize| match k.grads {
            None => false,
            Some(GradLifetime::ToLastBackward) => {
                backwards[c] > 0 && backwards[c] < k.m || running(c)
            }
            Some(GradLifetime::ToStepEnd) => backwards[c] > 0,
        };
        let grad_layers = (0..k.chunk_layers.len())
            .filter(|&c| held(c))
            .map(|c| k.chunk_layers[c])
            .sum();
        let grad_embedding = k.embedding && held(0);
        let grad_head = k.head && held(last_chunk as usize);
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
            grad_layers,
            grad_embedding,
            grad_head,
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
                        grad_layers: 0,
                        grad_embedding: false,
                        grad_head: false,
                    };
                    if !listed.contains(&mo) {
                        listed.push(mo);
                    }
                    if !op.forward {
                        (l, e, h) = (l - n, e - u64::from(first), h - u64::from(last));
                    }
                }
                let found = moments(&w, s, &chunks, None);
                assert_eq!(&listed[..], &found[..], "{layers} {pp} {v} {m} {s}");
                // A second call is the cached list.
                assert!(Rc::ptr_eq(&found, &moments(&w, s, &chunks, None)));
            }
        }
    }

    /// Lazily allocated gradients are held from a chunk's first backward to its last: none
    /// before the first backward, every chunk's once each has started and the step is not
    /// over, and the chunk running its last backward still holds them during it.
    #[test]
    fn held_gradients_follow_each_chunks_backwards() {
        use GradLifetime::{ToLastBackward, ToStepEnd};
        let stage0 = |w: &ValidWorkload, life| moments(w, 0, &w.stage_chunks(0), life);
        let held = |w: &ValidWorkload, life| -> Vec<u64> {
            stage0(w, life).iter().map(|m| m.grad_layers).collect()
        };
        // Two micro-batches, no pipeline: F0 holds nothing, B0 and F1 hold every layer (B1
        // repeats B0's moment). Shards (ZeRO 2 and 3) are held the same way here.
        let w = gpt3_tp_sp(4, (1, 1, 1), 2, 1, Options::default());
        assert_eq!(held(&w, Some(ToLastBackward)), vec![0, 4, 4]);
        assert_eq!(held(&w, Some(ToStepEnd)), vec![0, 4, 4]);
        assert!(held(&w, None).iter().all(|&l| l == 0));
        // Interleaved with as many micro-batches as stages: every forward runs before the
        // first backward, so the moment holding the most activations holds no gradients; the
        // last chunk's are held from its first backward, the first chunk's (with the embedding)
        // only at the end.
        let w = gpt3_tp_sp(8, (2, 2, 1), 2, 2, Options::default());
        let chunks = w.stage_chunks(0);
        let whole = stage0(&w, Some(ToLastBackward));
        let most = whole.iter().map(|m| m.layers).max().unwrap();
        let first_at_most = whole.iter().find(|m| m.layers == most).unwrap();
        assert_eq!(first_at_most.grad_layers, 0);
        assert!(!first_at_most.grad_embedding);
        let first_backward = whole.iter().find(|m| m.step == Step::Backward).unwrap();
        assert_eq!(first_backward.grad_layers, chunks[1].1);
        assert!(!first_backward.grad_embedding);
        assert!(whole.iter().any(|m| m.grad_embedding));
        // The last moment is chunk 0's last backward: whole, only chunk 0's are held (chunk 1's
        // went with its last backward); shards stay to the step's end, so both chunks'.
        let shards = stage0(&w, Some(ToStepEnd));
        let last = |m: &[Moment]| m.last().unwrap().grad_layers;
        assert_eq!(last(&whole), chunks[0].1);
        assert_eq!(last(&shards), chunks[0].1 + chunks[1].1);
        // With twice as many micro-batches, the steady state holds activations as many as the
        // warm-up's and every chunk's gradients at once.
        let mut options = Options::default();
        options.runtime.pp_round = Some(2);
        let w = gpt3_tp_sp(8, (2, 2, 1), 4, 2, options);
        let found = stage0(&w, Some(ToLastBackward));
        let most = found.iter().map(|m| m.layers).max().unwrap();
        assert!(found
            .iter()
            .any(|m| m.layers == most && m.grad_layers == 4 && m.grad_embedding));
    }
}
