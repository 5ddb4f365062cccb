//! A direct check of the fused attention kernels on GPU 0 against a double-precision
//! reference on the host (the same comparison `tests/cuda-emu` makes on the CPU emulator), for
//! the GPU tests: forward output and log-sum-exp, and dQ, dK, dV accumulated onto non-zero
//! starting values.

use std::rc::Rc;

use half::bf16;

use crate::backend::unit::rng::SplitMix64;
use crate::backend::AttnCall;

use super::gpu::Gpu;
use super::mem::Phys;
use super::ops::DevMat;
use super::Result;

/// Relative errors (‖got − want‖/‖want‖) of one fused attention call, and the largest
/// absolute log-sum-exp error.
#[derive(Debug, Clone, Copy)]
pub struct FlashCheck {
    /// Forward output.
    pub out: f64,
    /// Forward log-sum-exp (largest absolute error).
    pub lse: f64,
    /// dQ.
    pub dq: f64,
    /// dK.
    pub dk: f64,
    /// dV.
    pub dv: f64,
}

fn rel(got: &[f64], want: &[f64]) -> f64 {
    let (mut d, mut w) = (0.0, 0.0);
    for (g, x) in got.iter().zip(want) {
        d += (g - x) * (g - x);
        w += x * x;
    }
    if w > 0.0 {
        (d / w).sqrt()
    } else {
        d.sqrt()
    }
}

fn upload<T>(gpu: &Rc<Gpu>, data: &[T]) -> Result<Phys> {
    let bytes = std::mem::size_of_val(data);
    let ptr = gpu.alloc(bytes)?;
    let p = Phys {
        gpu: gpu.clone(),
        ptr,
        bytes,
    };
    gpu.upload(ptr, data)?;
    Ok(p)
}

fn download_f32(p: &Phys, n: usize) -> Result<Vec<f32>> {
    let mut v = vec![0f32; n];
    p.gpu.download(&mut v, p.ptr)?;
    Ok(v)
}

/// Runs `call` forward then backward on GPU 0 with random inputs and compares with the
/// reference (small calls only: the reference is O(batch·heads·q·kv·d) on the host).
pub fn flash_selftest(call: AttnCall, seed: u64) -> Result<FlashCheck> {
    thread_local! {
        static GPU: std::cell::RefCell<Option<Rc<Gpu>>> = const { std::cell::RefCell::new(None) };
    }
    let gpu = match GPU.with(|g| g.borrow().clone()) {
        Some(g) => g,
        None => {
            let g = Rc::new(Gpu::new(0)?);
            GPU.with(|c| *c.borrow_mut() = Some(g.clone()));
            g
        }
    };
    let (b, hs, nq, nkv, d) = (
        call.batch,
        call.heads,
        call.q_tokens,
        call.kv_tokens,
        call.head_dim,
    );
    let w = hs * d;
    let mut rng = SplitMix64::new(seed);
    let mut rand =
        |n: usize| -> Vec<bf16> { (0..n).map(|_| bf16::from_f64(rng.uniform())).collect() };
    let (q, k, v, dout) = (
        rand(b * nq * w),
        rand(b * nkv * w),
        rand(b * nkv * w),
        rand(b * nq * w),
    );
    let geo = AttnCall {
        batch: b,
        heads: hs,
        q_tokens: nq,
        kv_tokens: nkv,
        head_dim: d,
        causal: call.causal,
    };
    let (qd, kd, vd, od) = (
        upload(&gpu, &q)?,
        upload(&gpu, &k)?,
        upload(&gpu, &v)?,
        upload(&gpu, &dout)?,
    );
    let acc = upload(&gpu, &vec![0f32; b * nq * w])?;
    let lse = upload(&gpu, &vec![f32::NEG_INFINITY; b * nq * hs])?;
    gpu.flash_fwd(
        &geo,
        DevMat::new(qd.ptr, w),
        DevMat::new(kd.ptr, w),
        DevMat::new(vd.ptr, w),
        DevMat::new(acc.ptr, w),
        lse.ptr,
        1,
    )?;
    let o32 = download_f32(&acc, b * nq * w)?;
    let l32 = download_f32(&lse, b * nq * hs)?;
    let o_bf: Vec<bf16> = o32.iter().map(|&x| bf16::from_f32(x)).collect();
    let obd = upload(&gpu, &o_bf)?;
    let delta = upload(&gpu, &vec![0f32; b * nq * hs])?;
    gpu.attn_delta(
        DevMat::new(od.ptr, w),
        DevMat::new(obd.ptr, w),
        delta.ptr,
        b * nq,
        hs,
        d,
    )?;
    let dq = upload(&gpu, &vec![0.5f32; b * nq * w])?;
    let dk = upload(&gpu, &vec![-0.25f32; b * nkv * w])?;
    let dv = upload(&gpu, &vec![0.125f32; b * nkv * w])?;
    gpu.flash_bwd(
        &geo,
        DevMat::new(qd.ptr, w),
        DevMat::new(kd.ptr, w),
        DevMat::new(vd.ptr, w),
        DevMat::new(od.ptr, w),
        lse.ptr,
        delta.ptr,
        DevMat::new(dq.ptr, w),
        DevMat::new(dk.ptr, w),
        DevMat::new(dv.ptr, w),
        1,
    )?;
    let (gq, gk, gv) = (
        download_f32(&dq, b * nq * w)?,
        download_f32(&dk, b * nkv * w)?,
        download_f32(&dv, b * nkv * w)?,
    );

    // Reference, on the same bf16 inputs.
    let f = |x: &[bf16], i: usize| x[i].to_f64();
    let scale = 1.0 / (d as f64).sqrt();
    let mut ro = vec![0.0; b * nq * w];
    let (mut rdq, mut rdk, mut rdv) = (
        vec![0.0; b * nq * w],
        vec![0.0; b * nkv * w],
        vec![0.0; b * nkv * w],
    );
    let (mut go, mut wo, mut lse_err) = (Vec::new(), Vec::new(), 0.0f64);
    for beta in 0..b {
        for h in 0..hs {
            for i in 0..nq {
                let qi = (beta * nq + i) * w + h * d;
                let keys: Vec<usize> = (0..nkv)
                    .filter(|&j| !call.causal || j as i64 <= i as i64 + nkv as i64 - nq as i64)
                    .collect();
                if keys.is_empty() {
                    continue;
                }
                let s: Vec<f64> = keys
                    .iter()
                    .map(|&j| {
                        let kj = (beta * nkv + j) * w + h * d;
                        (0..d).map(|c| f(&q, qi + c) * f(&k, kj + c)).sum::<f64>() * scale
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let l = m + s.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
                lse_err = lse_err.max((l32[(beta * nq + i) * hs + h] as f64 - l).abs());
                let p: Vec<f64> = s.iter().map(|x| (x - l).exp()).collect();
                for (n, &j) in keys.iter().enumerate() {
                    let kj = (beta * nkv + j) * w + h * d;
                    for c in 0..d {
                        ro[qi + c] += p[n] * f(&v, kj + c);
                    }
                }
                for c in 0..d {
                    go.push(o32[qi + c] as f64);
                    wo.push(ro[qi + c]);
                }
                let dl: f64 = (0..d).map(|c| f(&dout, qi + c) * ro[qi + c]).sum();
                for (n, &j) in keys.iter().enumerate() {
                    let kj = (beta * nkv + j) * w + h * d;
                    let dp: f64 = (0..d).map(|c| f(&dout, qi + c) * f(&v, kj + c)).sum();
                    let ds = p[n] * (dp - dl);
                    for c in 0..d {
                        rdq[qi + c] += scale * ds * f(&k, kj + c);
                        rdk[kj + c] += scale * ds * f(&q, qi + c);
                        rdv[kj + c] += p[n] * f(&dout, qi + c);
                    }
                }
            }
        }
    }
    let minus = |x: &[f32], c: f64| x.iter().map(|&y| y as f64 - c).collect::<Vec<f64>>();
    Ok(FlashCheck {
        out: rel(&go, &wo),
        lse: lse_err,
        dq: rel(&minus(&gq, 0.5), &rdq),
        dk: rel(&minus(&gk, -0.25), &rdk),
        dv: rel(&minus(&gv, 0.125), &rdv),
    })
}
