//! One attention block of a ring step (or TP's whole-sequence call) on a device, forward and
//! backward: the fused kernels, or the unfused path with the same materialised buffers —
//! scores, block log-sum-exp, probabilities, block output; probabilities, their gradient, the
//! score gradient — under the names and in the order the CPU runtime's `attention` uses.

pub(super) use crate::backend::unit::attention::{visibility, Visibility};
use crate::backend::unit::device::Dtype;
use crate::memory::names;

use super::super::gpu::{Op, Ty};
use super::super::mem::Buf;
use super::super::ops::{softmax_scale, DevMat};
use super::super::Result;
use super::world::World;
use crate::backend::AttnCall;

const BF: Dtype = Dtype::Bf16;
const FP: Dtype = Dtype::Fp32;

/// What a block computes with: Q, K, V (bf16), the running output/accumulators.
pub(super) struct BlockIo {
    pub q: DevMat,
    pub k: DevMat,
    pub v: DevMat,
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
            1,
        );
    }
    let (b, ag, nq, nkv, d) = (g.batch, g.heads, g.q_tokens, g.kv_tokens, g.head_dim);
    let blk = nq * nkv;
    let scores = w.buf(i, names::ATTN_BLOCK_SCORES, BF, b * ag * blk)?;
    for beta in 0..b {
        w.gemm(
            i,
            (nq, nkv, d),
            Op::n(io.q.ptr + (2 * beta * nq * io.q.ld) as u64, io.q.ld).strided(d),
            Op::t(io.k.ptr + (2 * beta * nkv * io.k.ld) as u64, io.k.ld).strided(d),
            Op::n(scores.at(beta * ag * blk), nkv).strided(blk),
            Ty::Bf16,
            1.0,
            0.0,
            ag,
        )?;
    }
    let blse = w.zeros(i, names::ATTN_BLOCK_LSE_FP32, FP, b * nq * ag)?;
    let probs = w.buf(i, names::ATTN_BLOCK_PROBS, BF, b * ag * blk)?;
    gpu.softmax_rows(g, scores.ptr(), probs.ptr(), blse.ptr())?;
    drop(scores);
    let ob = w.zeros(i, names::ATTN_BLOCK_OUT, BF, b * nq * hg)?;
    for beta in 0..b {
        w.gemm(
            i,
            (nq, d, nkv),
            Op::n(probs.at(beta * ag * blk), nkv).strided(blk),
            Op::n(io.v.ptr + (2 * beta * nkv * io.v.ld) as u64, io.v.ld).strided(d),
            Op::n(ob.at(beta * nq * hg), hg).strided(d),
            Ty::Bf16,
            1.0,
            0.0,
            ag,
        )?;
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
            g, io.q, io.k, io.v, x.dout, x.lse, x.delta, x.dq, x.dk, x.dv, 1,
        );
    }
    let (b, ag, nq, nkv, d) = (g.batch, g.heads, g.q_tokens, g.kv_tokens, g.head_dim);
    let blk = nq * nkv;
    let off = |m: DevMat, rows: usize, beta: usize| m.ptr + (2 * beta * rows * m.ld) as u64;
    let off4 = |m: DevMat, rows: usize, beta: usize| m.ptr + (4 * beta * rows * m.ld) as u64;
    let probs = w.buf(i, names::ATTN_BLOCK_PROBS, BF, b * ag * blk)?;
    for beta in 0..b {
        w.gemm(
            i,
            (nq, nkv, d),
            Op::n(off(io.q, nq, beta), io.q.ld).strided(d),
            Op::t(off(io.k, nkv, beta), io.k.ld).strided(d),
            Op::n(probs.at(beta * ag * blk), nkv).strided(blk),
            Ty::Bf16,
            1.0,
            0.0,
            ag,
        )?;
    }
    gpu.probs_from_lse(g, probs.ptr(), x.lse)?;
    let dp = w.buf(i, names::ATTN_BLOCK_GRAD_PROBS, BF, b * ag * blk)?;
    for beta in 0..b {
        w.gemm(
            i,
            (nq, nkv, d),
            Op::n(off(x.dout, nq, beta), x.dout.ld).strided(d),
            Op::t(off(io.v, nkv, beta), io.v.ld).strided(d),
            Op::n(dp.at(beta * ag * blk), nkv).strided(blk),
            Ty::Bf16,
            1.0,
            0.0,
            ag,
        )?;
    }
    let ds = w.buf(i, names::ATTN_BLOCK_GRAD_SCORES, BF, b * ag * blk)?;
    gpu.grad_scores(g, probs.ptr(), dp.ptr(), x.delta, ds.ptr())?;
    drop(dp);
    let scale = softmax_scale(g);
    for beta in 0..b {
        let (s, p) = (ds.at(beta * ag * blk), probs.at(beta * ag * blk));
        // dQ += scale·dS·K, dK += scale·dSᵀ·Q, dV += Pᵀ·dO (fp32 accumulators).
        w.gemm(
            i,
            (nq, d, nkv),
            Op::n(s, nkv).strided(blk),
            Op::n(off(io.k, nkv, beta), io.k.ld).strided(d),
            Op::n(off4(x.dq, nq, beta), x.dq.ld).strided(d),
            Ty::F32,
            scale,
            1.0,
            ag,
        )?;
        w.gemm(
            i,
            (nkv, d, nq),
            Op::t(s, nkv).strided(blk),
            Op::n(off(io.q, nq, beta), io.q.ld).strided(d),
            Op::n(off4(x.dk, nkv, beta), x.dk.ld).strided(d),
            Ty::F32,
            scale,
            1.0,
            ag,
        )?;
        w.gemm(
            i,
            (nkv, d, nq),
            Op::t(p, nkv).strided(blk),
            Op::n(off(x.dout, nq, beta), x.dout.ld).strided(d),
            Op::n(off4(x.dv, nkv, beta), x.dv.ld).strided(d),
            Ty::F32,
            1.0,
            1.0,
            ag,
        )?;
    }
    drop(ds);
    drop(probs);
    Ok(())
}
