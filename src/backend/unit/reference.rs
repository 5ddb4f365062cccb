//! Plain single-device f64 references: attention (optionally causal) and MLP, forward and
//! backward, with the global layouts every parallel version is checked against.
//!
//! Layouts (row-major in meaning; the matrices are nalgebra's column-major `DMatrix`):
//! - `x`, `out`, `dout`, `dx`: (b·s) × h, row `β·s + t` is token `t` of sample `β`;
//! - `wqkv`: h × 3h, columns `[Q | K | V]`, head `k` at columns `k·d .. (k+1)·d` of each part
//!   (d = h/a); `wo`: h × h;
//! - `w1`: h × f, `w2`: f × h.
//!
//! Attention: `out = concat_heads(softmax(Q_k K_kᵀ/√d + mask) V_k) · W_o` with `Q|K|V = X·W_qkv`;
//! the causal mask hides key positions after the query position (global positions).
//! MLP: `out = GeLU(X·W1)·W2` with the tanh GeLU of [`super::mlp::gelu_f64`]; SwiGLU when W1
//! has twice W2's rows in columns (`[gate | up]`): `out = (SiLU(X·W1_gate) ∘ X·W1_up)·W2`.

use nalgebra::DMatrix;

use super::device::Mat;
use super::mlp::{gelu_f64, gelu_grad_f64, silu_f64, silu_grad_f64};

/// f64 matrix.
pub type M64 = DMatrix<f64>;

/// Output and gradients of the attention unit.
#[derive(Debug, Clone)]
pub struct AttentionResult {
    /// Output, (b·s) × h.
    pub out: M64,
    /// Gradient of the input.
    pub dx: M64,
    /// Gradient of W_qkv, h × (h + 2·kv·d) (h × 3h without grouped-query attention).
    pub dwqkv: M64,
    /// Gradient of W_o, h × h.
    pub dwo: M64,
}

/// Output and gradients of the MLP unit.
#[derive(Debug, Clone)]
pub struct MlpResult {
    /// Output, (b·s) × h.
    pub out: M64,
    /// Gradient of the input.
    pub dx: M64,
    /// Gradient of W1, h × f.
    pub dw1: M64,
    /// Gradient of W2, f × h.
    pub dw2: M64,
}

/// Row-wise softmax of one head's scores (masked entries are `-inf`) into probabilities.
fn softmax_rows(s: &mut M64) {
    for r in 0..s.nrows() {
        let m = s.row(r).iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let mut sum = 0.0;
        for c in 0..s.ncols() {
            let e = (s[(r, c)] - m).exp();
            s[(r, c)] = e;
            sum += e;
        }
        for c in 0..s.ncols() {
            s[(r, c)] /= sum;
        }
    }
}

/// Probabilities of query head `k` of sample `beta` (its K/V head: `k / rep`).
#[allow(clippy::too_many_arguments)]
fn head_probs(
    qkv: &M64,
    beta: usize,
    k: usize,
    s: usize,
    h: usize,
    d: usize,
    rep: usize,
    causal: bool,
) -> M64 {
    let scale = 1.0 / (d as f64).sqrt();
    let q = qkv.view((beta * s, k * d), (s, d));
    let kk = qkv.view((beta * s, h + (k / rep) * d), (s, d));
    let mut sc = q * kk.transpose() * scale;
    if causal {
        for r in 0..s {
            for c in r + 1..s {
                sc[(r, c)] = f64::NEG_INFINITY;
            }
        }
    }
    softmax_rows(&mut sc);
    sc
}

/// Attention forward and backward for `x` ((b·s) × h), `a` heads, upstream gradient `dout`.
/// Grouped-query attention when W_qkv has fewer than 3h columns: `[Q (h) | K (kv·d) | V (kv·d)]`,
/// query head k attending with K/V head `k / (a/kv)`.
pub fn attention(
    x: &M64,
    wqkv: &M64,
    wo: &M64,
    dout: &M64,
    b: usize,
    a: usize,
    causal: bool,
) -> AttentionResult {
    let h = x.ncols();
    let s = x.nrows() / b;
    let d = h / a;
    let scale = 1.0 / (d as f64).sqrt();
    // K/V columns (kv heads × d) and query heads per K/V head.
    let kvw = (wqkv.ncols() - h) / 2;
    let rep = (a / (kvw / d).max(1)).max(1);
    let qkv = x * wqkv;
    let mut o = M64::zeros(b * s, h);
    for beta in 0..b {
        for k in 0..a {
            let p = head_probs(&qkv, beta, k, s, h, d, rep, causal);
            let v = qkv.view((beta * s, h + kvw + (k / rep) * d), (s, d));
            o.view_mut((beta * s, k * d), (s, d)).copy_from(&(p * v));
        }
    }
    let out = &o * wo;
    let do_ = dout * wo.transpose();
    let dwo = o.transpose() * dout;
    let mut dqkv = M64::zeros(b * s, h + 2 * kvw);
    for beta in 0..b {
        for k in 0..a {
            let p = head_probs(&qkv, beta, k, s, h, d, rep, causal);
            let q = qkv.view((beta * s, k * d), (s, d));
            let (ko, vo) = (h + (k / rep) * d, h + kvw + (k / rep) * d);
            let kk = qkv.view((beta * s, ko), (s, d));
            let v = qkv.view((beta * s, vo), (s, d));
            let doh = do_.view((beta * s, k * d), (s, d));
            let dp = doh * v.transpose();
            let mut ds = M64::zeros(s, s);
            for r in 0..s {
                let dr: f64 = (0..s).map(|c| p[(r, c)] * dp[(r, c)]).sum();
                for c in 0..s {
                    ds[(r, c)] = p[(r, c)] * (dp[(r, c)] - dr);
                }
            }
            dqkv.view_mut((beta * s, k * d), (s, d))
                .copy_from(&(&ds * kk * scale));
            // The query heads that share a K/V head add their gradients into it.
            let dk = ds.transpose() * q * scale;
            let dv = p.transpose() * doh;
            let mut dkk = dqkv.view_mut((beta * s, ko), (s, d));
            dkk += &dk;
            let mut dvv = dqkv.view_mut((beta * s, vo), (s, d));
            dvv += &dv;
        }
    }
    AttentionResult {
        out,
        dx: &dqkv * wqkv.transpose(),
        dwqkv: x.transpose() * &dqkv,
        dwo,
    }
}

/// MLP forward and backward.
pub fn mlp(x: &M64, w1: &M64, w2: &M64, dout: &M64) -> MlpResult {
    let hpre = x * w1;
    let f = w2.nrows();
    let swiglu = w1.ncols() == 2 * f;
    let act = if swiglu {
        // SwiGLU: W1 = [gate | up].
        let (g, u) = (hpre.columns(0, f), hpre.columns(f, f));
        g.zip_map(&u, |g, u| silu_f64(g) * u)
    } else {
        hpre.map(gelu_f64)
    };
    let out = &act * w2;
    let da = dout * w2.transpose();
    let dh = if swiglu {
        let (g, u) = (hpre.columns(0, f), hpre.columns(f, f));
        let mut dh = M64::zeros(hpre.nrows(), 2 * f);
        for r in 0..hpre.nrows() {
            for c in 0..f {
                let (gv, uv, d) = (g[(r, c)], u[(r, c)], da[(r, c)]);
                dh[(r, c)] = d * uv * silu_grad_f64(gv);
                dh[(r, f + c)] = d * silu_f64(gv);
            }
        }
        dh
    } else {
        da.zip_map(&hpre, |g, z| g * gelu_grad_f64(z))
    };
    MlpResult {
        out,
        dx: &dh * w1.transpose(),
        dw1: x.transpose() * &dh,
        dw2: act.transpose() * dout,
    }
}

/// The f64 copy of an f32 matrix (exactly the same values).
pub fn to64(m: &Mat) -> M64 {
    m.map(|x| x as f64)
}

/// ‖got − want‖_F / ‖want‖_F in f64 (‖got‖_F when `want` is zero; infinite on a shape
/// mismatch or a non-finite value).
pub fn rel_error(got: &Mat, want: &M64) -> f64 {
    if got.shape() != want.shape() {
        return f64::INFINITY;
    }
    let diff: f64 = got
        .iter()
        .zip(want.iter())
        .map(|(&g, &w)| (g as f64 - w).powi(2))
        .sum::<f64>()
        .sqrt();
    let norm = want.norm();
    let e = if norm > 0.0 { diff / norm } else { diff };
    if e.is_nan() {
        f64::INFINITY
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Finite differences of a scalar loss L = Σ out∘dout check the reference's own gradients.
    #[test]
    fn exec_reference_gradients_match_finite_differences() {
        let (b, s, h, a, f) = (1, 4, 4, 2, 6);
        let mut rng = crate::backend::unit::rng::SplitMix64::new(7);
        let mut m = |r, c| M64::from_fn(r, c, |_, _| rng.uniform());
        let x = m(b * s, h);
        let wqkv = m(h, 3 * h);
        let wo = m(h, h);
        let dout = m(b * s, h);
        let w1 = m(h, f);
        let w2 = m(f, h);
        let eps = 1e-6;
        for causal in [false, true] {
            let r = attention(&x, &wqkv, &wo, &dout, b, a, causal);
            let loss = |x: &M64, wqkv: &M64, wo: &M64| {
                attention(x, wqkv, wo, &dout, b, a, causal)
                    .out
                    .component_mul(&dout)
                    .sum()
            };
            for (i, j) in [(0, 0), (3, 2), (1, 3)] {
                let mut xp = x.clone();
                xp[(i, j)] += eps;
                let mut xm = x.clone();
                xm[(i, j)] -= eps;
                let fd = (loss(&xp, &wqkv, &wo) - loss(&xm, &wqkv, &wo)) / (2.0 * eps);
                assert!(
                    (fd - r.dx[(i, j)]).abs() < 1e-6,
                    "dx {fd} vs {}",
                    r.dx[(i, j)]
                );
            }
            for (i, j) in [(0, 0), (2, 7), (3, 11)] {
                let mut wp = wqkv.clone();
                wp[(i, j)] += eps;
                let mut wm = wqkv.clone();
                wm[(i, j)] -= eps;
                let fd = (loss(&x, &wp, &wo) - loss(&x, &wm, &wo)) / (2.0 * eps);
                assert!((fd - r.dwqkv[(i, j)]).abs() < 1e-6);
            }
            let mut wp = wo.clone();
            wp[(1, 2)] += eps;
            let mut wm = wo.clone();
            wm[(1, 2)] -= eps;
            let fd = (loss(&x, &wqkv, &wp) - loss(&x, &wqkv, &wm)) / (2.0 * eps);
            assert!((fd - r.dwo[(1, 2)]).abs() < 1e-6);
        }
        let r = mlp(&x, &w1, &w2, &dout);
        let loss =
            |x: &M64, w1: &M64, w2: &M64| mlp(x, w1, w2, &dout).out.component_mul(&dout).sum();
        let mut xp = x.clone();
        xp[(2, 1)] += eps;
        let mut xm = x.clone();
        xm[(2, 1)] -= eps;
        let fd = (loss(&xp, &w1, &w2) - loss(&xm, &w1, &w2)) / (2.0 * eps);
        assert!((fd - r.dx[(2, 1)]).abs() < 1e-6);
        let mut wp = w1.clone();
        wp[(3, 5)] += eps;
        let mut wm = w1.clone();
        wm[(3, 5)] -= eps;
        let fd = (loss(&x, &wp, &w2) - loss(&x, &wm, &w2)) / (2.0 * eps);
        assert!((fd - r.dw1[(3, 5)]).abs() < 1e-6);
        let mut wp = w2.clone();
        wp[(4, 0)] += eps;
        let mut wm = w2.clone();
        wm[(4, 0)] -= eps;
        let fd = (loss(&x, &w1, &wp) - loss(&x, &w1, &wm)) / (2.0 * eps);
        assert!((fd - r.dw2[(4, 0)]).abs() < 1e-6);
    }

    /// Grouped-query attention is multi-head attention whose K/V heads are repeated: the same
    /// output and input gradient, and each shared K/V column's gradient is the sum of its
    /// copies'. Checked for 4 query heads on 2 and on 1 K/V heads, causal and not.
    #[test]
    fn exec_reference_grouped_query_is_multi_head_with_repeated_kv_heads() {
        let (b, s, a, d) = (2, 5, 4, 3);
        let h = a * d;
        let mut rng = crate::backend::unit::rng::SplitMix64::new(5);
        let mut m = |r, c| M64::from_fn(r, c, |_, _| rng.uniform());
        let (x, wo, dout) = (m(b * s, h), m(h, h), m(b * s, h));
        for kv in [2usize, 1] {
            let rep = a / kv;
            let wg = m(h, h + 2 * kv * d);
            // The multi-head W_qkv: K/V head k/rep's columns copied to head k.
            let mut wm = M64::zeros(h, 3 * h);
            wm.columns_mut(0, h).copy_from(&wg.columns(0, h));
            for k in 0..a {
                for part in 0..2 {
                    let from = h + part * kv * d + (k / rep) * d;
                    wm.columns_mut(h + part * h + k * d, d)
                        .copy_from(&wg.columns(from, d));
                }
            }
            for causal in [false, true] {
                let g = attention(&x, &wg, &wo, &dout, b, a, causal);
                let r = attention(&x, &wm, &wo, &dout, b, a, causal);
                assert!((&g.out - &r.out).amax() < 1e-12);
                assert!((&g.dx - &r.dx).amax() < 1e-12);
                assert!((&g.dwo - &r.dwo).amax() < 1e-12);
                assert!((g.dwqkv.columns(0, h) - r.dwqkv.columns(0, h)).amax() < 1e-12);
                assert_eq!(g.dwqkv.ncols(), h + 2 * kv * d);
                for j in 0..kv {
                    for part in 0..2 {
                        let mut sum = M64::zeros(h, d);
                        for k in (j * rep)..((j + 1) * rep) {
                            sum += r.dwqkv.columns(h + part * h + k * d, d);
                        }
                        let got = g.dwqkv.columns(h + part * kv * d + j * d, d);
                        assert!((got - sum).amax() < 1e-12, "kv {kv} head {j} part {part}");
                    }
                }
            }
        }
    }

    /// SwiGLU (W1 = [gate | up], twice W2's rows in columns): the reference's gradients
    /// against finite differences, in both halves of W1.
    #[test]
    fn exec_reference_swiglu_gradients_match_finite_differences() {
        let (h, f) = (4, 3);
        let mut rng = crate::backend::unit::rng::SplitMix64::new(11);
        let mut m = |r, c| M64::from_fn(r, c, |_, _| 2.0 * rng.uniform());
        let (x, w1, w2, dout) = (m(5, h), m(h, 2 * f), m(f, h), m(5, h));
        let r = mlp(&x, &w1, &w2, &dout);
        assert_eq!(r.dw1.shape(), (h, 2 * f));
        let loss =
            |x: &M64, w1: &M64, w2: &M64| mlp(x, w1, w2, &dout).out.component_mul(&dout).sum();
        let eps = 1e-6;
        let fd = |d: &dyn Fn(f64) -> f64| (d(eps) - d(-eps)) / (2.0 * eps);
        for (i, j) in [(2, 1), (4, 3)] {
            let g = fd(&|e| {
                let mut xe = x.clone();
                xe[(i, j)] += e;
                loss(&xe, &w1, &w2)
            });
            assert!(
                (g - r.dx[(i, j)]).abs() < 1e-6,
                "dx {g} vs {}",
                r.dx[(i, j)]
            );
        }
        // A gate column and an up column of W1.
        for (i, j) in [(3, 1), (0, f + 2)] {
            let g = fd(&|e| {
                let mut we = w1.clone();
                we[(i, j)] += e;
                loss(&x, &we, &w2)
            });
            assert!(
                (g - r.dw1[(i, j)]).abs() < 1e-6,
                "dw1 {g} vs {}",
                r.dw1[(i, j)]
            );
        }
        let g = fd(&|e| {
            let mut we = w2.clone();
            we[(2, 0)] += e;
            loss(&x, &w1, &we)
        });
        assert!((g - r.dw2[(2, 0)]).abs() < 1e-6);
    }
}
