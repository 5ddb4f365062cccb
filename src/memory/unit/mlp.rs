//! The MLP unit's moments on device i: the ring of weight-shard pairs, forward and backward,
//! with traveling fp32 gradient accumulators.

use super::moments::*;
use super::{UnitSpec, Visit};
use crate::config::Activation;
use crate::memory::layer::prod;
use crate::memory::names;
use crate::memory::{Kind, Phase};
use Kind::{Static, Stored, Transient};

pub(super) fn mlp(spec: &UnitSpec, i: u64, visit: Visit, sink: &mut dyn Sink) {
    let [b, s, h, _, f, p] = spec.shape.as_u64();
    let (bb, hh, pp) = (b as u128, h as u128, p as u128);
    let r = bb * (s as u128 / pp);
    let fp = f as u128 / pp;
    let (mats, u) = match spec.activation {
        Activation::Gelu => (2, 1),
        Activation::Swiglu => (3, 2),
    };
    let ws = prod(&[2, mats, hh, fp]);
    let gs = ws.saturating_mul(2);
    let x = prod(&[2, r, hh]);
    let hp = prod(&[2, u, r, fp]);
    let act = prod(&[2, r, fp]);
    let dh = prod(&[2, u, r, fp]);
    let rb = spec.metp.recv_buffers;
    let (hp_name, hp_kind) = if spec.metp.store_mlp_act {
        (names::MLP_ACT_INPUT, Stored)
    } else {
        (names::MLP_ACT_INPUT_BLOCK, Transient)
    };
    // Steps 0, 1 .. p−2 and p − 1 differ in the buffers they hold (and with a stored
    // activation input, the stored part grows with t).
    let steps: Vec<u64> = match visit {
        Visit::All => (0..p).collect(),
        Visit::Totals => near(p, &[0, 1, p as i128 - 1]),
        Visit::Transients => exactly(p, &[0, 1, p as i128 - 1]),
    };
    let base = |live: &mut Live| {
        live.add(names::MLP_WEIGHTS, Static, ws);
        live.add(names::OPTIMIZER_MAIN_GRADS_FP32, Static, gs);
        live.add(names::MLP_INPUT, Stored, x);
    };

    // ---------------- forward ----------------
    for &t in &steps {
        let mut s = Live::new(i, Phase::FwdMlp, None, Some(t));
        base(&mut s);
        s.add(names::MLP_OUTPUT_SUM, Transient, x);
        if spec.metp.store_mlp_act {
            s.add(hp_name, Stored, (t as u128).saturating_mul(hp));
        }
        let cur = p > 1 && t >= 1;
        if cur {
            s.add(names::MLP_WEIGHT_RECV, Transient, ws);
        }
        s.rising = true;
        s.event("ring step");
        let more = t + 1 < p;
        if more && rb == 2 {
            s.alloc(names::MLP_WEIGHT_RECV, Transient, ws);
        }
        s.event("activation input and output");
        s.alloc(hp_name, hp_kind, hp);
        s.alloc(names::MLP_ACT_OUTPUT_BLOCK, Transient, act);
        if !spec.metp.store_mlp_act {
            s.free(hp_name, hp, sink);
        }
        s.free(names::MLP_ACT_OUTPUT_BLOCK, act, sink);
        if more {
            if cur {
                s.free(names::MLP_WEIGHT_RECV, ws, sink);
            }
            if rb == 1 {
                s.event("weights received");
                s.alloc(names::MLP_WEIGHT_RECV, Transient, ws);
            }
        }
        s.finish(sink);
    }

    // ---------------- backward ----------------
    for &t in &steps {
        let mut s = Live::new(i, Phase::BwdMlp, None, Some(t));
        base(&mut s);
        if spec.metp.store_mlp_act {
            s.add(hp_name, Stored, pp.saturating_mul(hp));
        }
        s.add(names::GRAD_LAYER_OUTPUT, Transient, x);
        s.add(names::GRAD_LAYER_INPUT, Transient, x);
        let cur = p > 1 && t >= 1;
        // The own accumulator at step 0; another device's, traveling, after.
        let dw_name = if cur {
            names::MLP_WEIGHT_GRAD_RECV_FP32
        } else {
            names::MLP_WEIGHT_GRAD_ACC_FP32
        };
        s.add(dw_name, Transient, gs);
        if cur {
            s.add(names::MLP_WEIGHT_RECV, Transient, ws);
        }
        s.rising = true;
        s.event("ring step");
        let more = t + 1 < p;
        if rb == 2 && p > 1 {
            if more {
                s.alloc(names::MLP_WEIGHT_RECV, Transient, ws);
            }
            s.alloc(names::MLP_WEIGHT_GRAD_RECV_FP32, Transient, gs);
        }
        s.event("activation input, output and gradient");
        if !spec.metp.store_mlp_act {
            s.alloc(hp_name, Transient, hp);
        }
        s.alloc(names::MLP_ACT_OUTPUT_BLOCK, Transient, act);
        s.alloc(names::GRAD_MLP_ACT_BLOCK, Transient, dh);
        if !spec.metp.store_mlp_act {
            s.free(hp_name, hp, sink);
        }
        s.free(names::MLP_ACT_OUTPUT_BLOCK, act, sink);
        s.free(names::GRAD_MLP_ACT_BLOCK, dh, sink);
        if p > 1 {
            if rb == 1 {
                if cur {
                    s.free(names::MLP_WEIGHT_RECV, ws, sink);
                }
                s.free(dw_name, gs, sink);
                if more {
                    s.event("weights received");
                    s.alloc(names::MLP_WEIGHT_RECV, Transient, ws);
                }
                s.event("gradient accumulator received");
                s.alloc(names::MLP_WEIGHT_GRAD_RECV_FP32, Transient, gs);
            } else {
                if cur {
                    s.free(names::MLP_WEIGHT_RECV, ws, sink);
                }
                s.free(dw_name, gs, sink);
            }
        }
        s.finish(sink);
    }
}
