//! Weight shards of each head group of METP's attention outer loop, by broadcast from the
//! owner or relayed along the ring, with one or two receive buffers — the CPU runtime's
//! `WeightFetch`, stepped for all devices.

use crate::backend::unit::attention::AttnCfg;
use crate::backend::unit::device::{Dtype, Tag};
use crate::backend::unit::WeightExchange;
use crate::memory::names;

use super::super::mem::Buf;
use super::super::xfer::{Part, Pending};
use super::super::Result;
use super::world::World;

const BF: Dtype = Dtype::Bf16;

/// Weight shards of each head group in turn, by broadcast from the owner or relayed along the
/// ring, with one or two receive buffers (the CPU runtime's `WeightFetch`, stepped for all
/// devices: in ring order from the owner, so that each relay has received before it sends).
pub(super) struct Fetch {
    bwd: bool,
    rb: usize,
    exchange: WeightExchange,
    pending: Vec<Option<Pending>>,
    shapes: [(usize, Dtype); 2],
}

impl Fetch {
    pub(super) fn new(cfg: &AttnCfg, bwd: bool) -> Fetch {
        let (h, hg, p, wq) = (cfg.shape.h, cfg.shape.hg(), cfg.shape.p, cfg.wq());
        Fetch {
            bwd,
            rb: cfg.rb,
            exchange: cfg.exchange,
            pending: (0..p).map(|_| None).collect(),
            shapes: [(h * wq, BF), (hg * h, BF)],
        }
    }

    fn tag(&self, g: usize) -> Tag {
        Tag::AttnWeights {
            bwd: self.bwd,
            g: g as u32,
        }
    }

    fn src(&self, p: usize, i: usize, g: usize) -> usize {
        match self.exchange {
            WeightExchange::Broadcast => g,
            WeightExchange::Ring => (i + p - 1) % p,
        }
    }

    fn send_own(&self, w: &mut World, i: usize, own: &[Buf; 2]) -> Result<()> {
        let p = w.p();
        let dsts: Vec<usize> = match self.exchange {
            WeightExchange::Broadcast => (0..p).filter(|&j| j != i).collect(),
            WeightExchange::Ring if p > 1 => vec![(i + 1) % p],
            WeightExchange::Ring => vec![],
        };
        for j in dsts {
            w.send(
                i,
                j,
                self.tag(i),
                vec![Part::all(&own[0]), Part::all(&own[1])],
            )?;
        }
        Ok(())
    }

    /// Every device's shard of group `g`: `None` for the owner, else the filled receive
    /// buffers.
    pub(super) fn acquire(
        &mut self,
        w: &mut World,
        g: usize,
        own: &[[Buf; 2]],
    ) -> Result<Vec<Option<Vec<Buf>>>> {
        let p = w.p();
        let mut slots: Vec<Option<Vec<Buf>>> = (0..p).map(|_| None).collect();
        for k in 0..p {
            let i = (g + k) % p;
            if i == g && (self.rb == 1 || g == 0) {
                self.send_own(w, i, &own[i])?;
            }
            if self.rb == 2 && g + 1 < p && i == g + 1 {
                self.send_own(w, i, &own[i])?;
            }
            if g != i {
                let pending = match self.pending[i].take() {
                    Some(pd) => pd,
                    None => w.post(
                        i,
                        self.src(p, i, g),
                        self.tag(g),
                        names::ATTN_WEIGHT_RECV,
                        &self.shapes,
                    )?,
                };
                let got = w.wait(pending)?;
                if self.exchange == WeightExchange::Ring && (i + 1) % p != g {
                    w.send(
                        i,
                        (i + 1) % p,
                        self.tag(g),
                        vec![Part::all(&got[0]), Part::all(&got[1])],
                    )?;
                }
                slots[i] = Some(got);
            }
            if self.rb == 2 && g + 1 < p && g + 1 != i {
                self.pending[i] = Some(w.post(
                    i,
                    self.src(p, i, g + 1),
                    self.tag(g + 1),
                    names::ATTN_WEIGHT_RECV,
                    &self.shapes,
                )?);
            }
        }
        Ok(slots)
    }
}

/// (W_qkv, W_o) addresses device `i` uses for a group: its own or the received shard.
pub(super) fn weights(own: &[Buf; 2], slot: &Option<Vec<Buf>>) -> (u64, u64) {
    match slot {
        Some(s) => (s[0].ptr(), s[1].ptr()),
        None => (own[0].ptr(), own[1].ptr()),
    }
}
