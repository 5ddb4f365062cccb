//! One attention block of a ring step (or TP's whole-sequence call) on a device, forward and
//! backward: the fused kernels, or the unfused path with the same materialised buffers —
//! scores, block log-sum-exp, probabilities, block output; probabilities, their gradient, the
//! score gradient — under the names and in the order the CPU runtime's `attention` uses.
//! Grouped-query attention: the fused kernels take `rep`; the unfused GEMMs run in
//! `layout::head_batches`, `rep` batches of the query heads that each K/V head serves once.

pub(super) use crate::backend::unit::attention::{visibility, Visibility};
use crate::backend::unit::device::Dtype;
use crate::memory::names;

use super::super::gpu::{Op, Ty};
use super::super::mem::Buf;
use super::super::ops::{softmax_scale, DevMat};
use super::super::Result;
use super::world::World;
use crate::backend::cuda::layout::{head_batches, HeadBatch};
use crate::backend::AttnCall;

const BF: Dtype = Dtype::Bf16;
const FP: Dtype = Dtype::Fp32;

/// What a block computes with: Q, K, V (bf16; K and V of heads/rep heads), and how many query
/// heads share each K/V head (`rep`, 1 without grouped-query attention).
pub(super) struct BlockIo {
    pub q: DevMat,
    pub k: DevMat,
    pub v: DevMat,
    pub rep: usize,
}

/// Address of element (`row`, `col`) of a row-major matrix of `bytes`-byte elements.
fn at(m: DevMat, bytes: usize, row: usize, col: usize) -> u64 {
    m.ptr + (bytes * (row * m.ld + col)) as u64
}

/// One forward block of device `i`: fused, or unfused with its materialised buffers.
pub(super) fn block_fwd(
    w: &World,
    i: usize,
    fused: bool,
    g: &AttnCall,
    io: &BlockIo,
    acc: &Buf,
    lse: &Buf,
) -> Result<()> {
    let gpu = w.gpu(i);
    let hg = g.heads * g.head_dim;
    if fused {
        return gpu.flash_fwd(
            g,
            io.q,
            io.k,
            io.v,
            DevMat::new(acc.ptr(), hg),
            lse.ptr(),
            io.rep,
        );
    }
    let (b, ag, nq, nkv, d) = (g.batch, g.heads, g.q_tokens, g.kv_tokens, g.head_dim);
    let blk = nq * nkv;
    let batches = head_batches(ag, io.rep, d);
    let scores = w.buf(i, names::ATTN_BLOCK_SCORES, BF, b * ag * blk)?;
    for beta in 0..b {
        for hb in &batches {
            w.gemm(
                i,
                (nq, nkv, d),
                Op::n(at(io.q, 2, beta * nq, hb.q_col), io.q.ld).strided(hb.q_step),
                Op::t(at(io.k, 2, beta * nkv, hb.kv_col), io.k.ld).strided(hb.kv_step),
                Op::n(scores.at((beta * ag + hb.head) * blk), nkv).strided(hb.head_step * blk),
                Ty::Bf16,
                1.0,
                0.0,
                hb.count,
            )?;
        }
    }
    let blse = w.zeros(i, names::ATTN_BLOCK_LSE_FP32, FP, b * nq * ag)?;
    let probs = w.buf(i, names::ATTN_BLOCK_PROBS, BF, b * ag * blk)?;
    gpu.softmax_rows(g, scores.ptr(), probs.ptr(), blse.ptr())?;
    drop(scores);
    let ob = w.zeros(i, names::ATTN_BLOCK_OUT, BF, b * nq * hg)?;
    for beta in 0..b {
        for hb in &batches {
            w.gemm(
                i,
                (nq, d, nkv),
                Op::n(probs.at((beta * ag + hb.head) * blk), nkv).strided(hb.head_step * blk),
                Op::n(at(io.v, 2, beta * nkv, hb.kv_col), io.v.ld).strided(hb.kv_step),
                Op::n(ob.at(beta * nq * hg + hb.q_col), hg).strided(hb.q_step),
                Ty::Bf16,
                1.0,
                0.0,
                hb.count,
            )?;
        }
    }
    drop(probs);
    gpu.lse_merge(
        DevMat::new(acc.ptr(), hg),
        lse.ptr(),
        DevMat::new(ob.ptr(), hg),
        blse.ptr(),
        b * nq,
        ag,
        d,
    )?;
    drop(ob);
    drop(blse);
    Ok(())
}

/// The gradient side of a backward block.
pub(super) struct BwdIo {
    pub dout: DevMat,
    pub lse: u64,
    pub delta: u64,
    pub dq: DevMat,
    pub dk: DevMat,
    pub dv: DevMat,
}

/// One backward block of device `i`: fused, or unfused with its materialised buffers.
pub(super) fn block_bwd(
    w: &World,
    i: usize,
    fused: bool,
    g: &AttnCall,
    io: &BlockIo,
    x: &BwdIo,
) -> Result<()> {
    let gpu = w.gpu(i);
    if fused {
        return gpu.flash_bwd(
            g, io.q, io.k, io.v, x.dout, x.lse, x.delta, x.dq, x.dk, x.dv, io.rep,
        );
    }
    let (b, ag, nq, nkv, d) = (g.batch, g.heads, g.q_tokens, g.kv_tokens, g.head_dim);
    let blk = nq * nkv;
    let batches = head_batches(ag, io.rep, d);
    // Score-shaped blocks of query head hb.head of sample beta, stepping hb.head_step heads.
    let block = |buf: &Buf, beta: usize, hb: &HeadBatch| buf.at((beta * ag + hb.head) * blk);
    let probs = w.buf(i, names::ATTN_BLOCK_PROBS, BF, b * ag * blk)?;
    for beta in 0..b {
        for hb in &batches {
            w.gemm(
                i,
                (nq, nkv, d),
                Op::n(at(io.q, 2, beta * nq, hb.q_col), io.q.ld).strided(hb.q_step),
                Op::t(at(io.k, 2, beta * nkv, hb.kv_col), io.k.ld).strided(hb.kv_step),
                Op::n(block(&probs, beta, hb), nkv).strided(hb.head_step * blk),
                Ty::Bf16,
                1.0,
                0.0,
                hb.count,
            )?;
        }
    }
    gpu.probs_from_lse(g, probs.ptr(), x.lse)?;
    let dp = w.buf(i, names::ATTN_BLOCK_GRAD_PROBS, BF, b * ag * blk)?;
    for beta in 0..b {
        for hb in &batches {
            w.gemm(
                i,
                (nq, nkv, d),
                Op::n(at(x.dout, 2, beta * nq, hb.q_col), x.dout.ld).strided(hb.q_step),
                Op::t(at(io.v, 2, beta * nkv, hb.kv_col), io.v.ld).strided(hb.kv_step),
                Op::n(block(&dp, beta, hb), nkv).strided(hb.head_step * blk),
                Ty::Bf16,
                1.0,
                0.0,
                hb.count,
            )?;
        }
    }
    let ds = w.buf(i, names::ATTN_BLOCK_GRAD_SCORES, BF, b * ag * blk)?;
    gpu.grad_scores(g, probs.ptr(), dp.ptr(), x.delta, ds.ptr())?;
    drop(dp);
    let scale = softmax_scale(g);
    for beta in 0..b {
        // One batch after another: the query heads of one K/V head add into its dK, dV in
        // different batches, never within one (`layout::head_batches`).
        for hb in &batches {
            let (s, p) = (block(&ds, beta, hb), block(&probs, beta, hb));
            let hs = hb.head_step * blk;
            // dQ += scale·dS·K, dK += scale·dSᵀ·Q, dV += Pᵀ·dO (fp32 accumulators).
            w.gemm(
                i,
                (nq, d, nkv),
                Op::n(s, nkv).strided(hs),
                Op::n(at(io.k, 2, beta * nkv, hb.kv_col), io.k.ld).strided(hb.kv_step),
                Op::n(at(x.dq, 4, beta * nq, hb.q_col), x.dq.ld).strided(hb.q_step),
                Ty::F32,
                scale,
                1.0,
                hb.count,
            )?;
            w.gemm(
                i,
                (nkv, d, nq),
                Op::t(s, nkv).strided(hs),
                Op::n(at(io.q, 2, beta * nq, hb.q_col), io.q.ld).strided(hb.q_step),
                Op::n(at(x.dk, 4, beta * nkv, hb.kv_col), x.dk.ld).strided(hb.kv_step),
                Ty::F32,
                scale,
                1.0,
                hb.count,
            )?;
            w.gemm(
                i,
                (nkv, d, nq),
                Op::t(p, nkv).strided(hs),
                Op::n(at(x.dout, 2, beta * nq, hb.q_col), x.dout.ld).strided(hb.q_step),
                Op::n(at(x.dv, 4, beta * nkv, hb.kv_col), x.dv.ld).strided(hb.kv_step),
                Ty::F32,
                1.0,
                1.0,
                hb.count,
            )?;
        }
    }
    drop(ds);
    drop(probs);
    Ok(())
}
