//! Command-line quantities: `4k` = 4096, `1m` = 2^20, and sequence specs — `4k..512k` (doubling),
//! `4k..64k:+4k` (linear step), `4k,6k,100000` (list).

use crate::error::{Error, Result};

/// Parses one positive count with an optional binary suffix `k` (2^10), `m` (2^20), `g` (2^30).
pub fn parse_count(flag: &str, text: &str) -> Result<u64> {
    let t = text.trim();
    let (digits, mult) = match t.char_indices().last() {
        Some((i, c)) if c.eq_ignore_ascii_case(&'k') => (&t[..i], 1u64 << 10),
        Some((i, c)) if c.eq_ignore_ascii_case(&'m') => (&t[..i], 1u64 << 20),
        Some((i, c)) if c.eq_ignore_ascii_case(&'g') => (&t[..i], 1u64 << 30),
        _ => (t, 1),
    };
    let n: u64 = digits.parse().map_err(|_| {
        Error::arg(
            flag,
            format!("'{text}' is not a positive whole number (suffixes k, m, g allowed)"),
        )
    })?;
    let v = n
        .checked_mul(mult)
        .ok_or_else(|| Error::arg(flag, format!("'{text}' is too large")))?;
    if v == 0 {
        return Err(Error::arg(flag, format!("'{text}' must be positive")));
    }
    Ok(v)
}

/// Parses an amount in decimal units — `15T` = 15·10^12, `2.5M`, `400B` (K, M, B or G, T, P:
/// 10^3 to 10^15), or a plain number such as `1.5e13` — positive and finite, as tokens to
/// train are written.
pub fn parse_amount(flag: &str, text: &str) -> Result<f64> {
    let t = text.trim();
    let (digits, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1e3),
        Some('M') => (&t[..t.len() - 1], 1e6),
        Some('B') | Some('G') => (&t[..t.len() - 1], 1e9),
        Some('T') => (&t[..t.len() - 1], 1e12),
        Some('P') => (&t[..t.len() - 1], 1e15),
        _ => (t, 1.0),
    };
    let bad = || {
        Error::arg(
            flag,
            format!("'{text}' is not a positive amount (e.g. 15T, 2.5M, 1.5e13)"),
        )
    };
    let x: f64 = digits.trim().parse().map_err(|_| bad())?;
    let v = x * mult;
    if !(v.is_finite() && v > 0.0) {
        return Err(bad());
    }
    Ok(v)
}

/// Parses a comma-separated list of counts (`1,2,4,8`).
pub fn parse_list(flag: &str, text: &str) -> Result<Vec<u64>> {
    let items = text.split(',').count() as u64;
    let max = super::limits::MAX_SEQ_LENGTHS;
    if items > max {
        return Err(Error::arg(
            flag,
            format!("{items} values in one list (at most {max})"),
        ));
    }
    let items: Vec<u64> = text
        .split(',')
        .map(|s| parse_count(flag, s))
        .collect::<Result<_>>()?;
    Ok(dedup_sorted(items))
}

/// Parses a sequence spec into an increasing list of lengths.
pub fn parse_seq_spec(flag: &str, text: &str) -> Result<Vec<u64>> {
    if text.contains(',') {
        return parse_list(flag, text);
    }
    let Some((lo, rest)) = text.split_once("..") else {
        return Ok(vec![parse_count(flag, text)?]);
    };
    let (hi, step) = match rest.split_once(":+") {
        Some((hi, step)) => (hi, Some(step)),
        None => match rest.split_once(':') {
            Some(_) => {
                return Err(Error::arg(
                    flag,
                    format!("'{text}': a linear step is written ':+N', e.g. 4k..64k:+4k"),
                ))
            }
            None => (rest, None),
        },
    };
    let lo = parse_count(flag, lo)?;
    let hi = parse_count(flag, hi)?;
    if hi < lo {
        return Err(Error::arg(
            flag,
            format!("'{text}' is reversed: {hi} is smaller than {lo}"),
        ));
    }
    let step = match step {
        Some(step) => Some(
            parse_count(flag, step)
                .map_err(|_| Error::arg(flag, format!("'{text}': the step must be positive")))?,
        ),
        None => None,
    };
    // Counted before anything is expanded: `1..2^40:+1` would otherwise build 2^40 lengths
    // before finding out there are too many.
    let count = match step {
        Some(step) => (hi - lo) / step + 1,
        None => u64::from((hi / lo).ilog2()) + 1,
    };
    let max = super::limits::MAX_SEQ_LENGTHS;
    if count > max {
        return Err(Error::arg(
            flag,
            format!("'{text}' expands to {count} lengths (at most {max}); use a larger step"),
        ));
    }
    let mut out = Vec::with_capacity(count as usize);
    let mut s = lo;
    while s <= hi {
        out.push(s);
        let next = match step {
            Some(step) => s.checked_add(step),
            None => s.checked_mul(2),
        };
        s = match next {
            Some(n) => n,
            None => break,
        };
    }
    debug_assert_eq!(out.len() as u64, count);
    Ok(out)
}

fn dedup_sorted(mut v: Vec<u64>) -> Vec<u64> {
    v.sort_unstable();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_with_suffixes() {
        assert_eq!(parse_count("--seq", "4k").unwrap(), 4096);
        assert_eq!(parse_count("--seq", "1M").unwrap(), 1 << 20);
        assert_eq!(parse_count("--seq", "100000").unwrap(), 100_000);
        assert!(parse_count("--seq", "0").is_err());
        assert!(parse_count("--seq", "-4").is_err());
        assert!(parse_count("--seq", "4q").is_err());
        assert!(parse_count("--seq", "99999999999999999999k").is_err());
    }

    #[test]
    fn ranges() {
        assert_eq!(
            parse_seq_spec("--seq", "4k..32k").unwrap(),
            vec![4096, 8192, 16384, 32768]
        );
        assert_eq!(
            parse_seq_spec("--seq", "4k..16k:+4k").unwrap(),
            vec![4096, 8192, 12288, 16384]
        );
        assert_eq!(
            parse_seq_spec("--seq", "6k,4k,100000").unwrap(),
            vec![4096, 6144, 100000]
        );
        // 4k..512k doubles: 4, 8, …, 512 → 8 lengths (the README's main sweep).
        assert_eq!(parse_seq_spec("--seq", "4k..512k").unwrap().len(), 8);
        assert!(parse_seq_spec("--seq", "8k..4k").is_err());
        assert!(parse_seq_spec("--seq", "4k..8k:+0").is_err());
        assert!(parse_seq_spec("--seq", "4k..8k:4").is_err());
        assert!(parse_seq_spec("--seq", "..8k").is_err());
        // Doubling counts: 1..2^40 is 41 lengths; 3..2^40 stops below 2^40.
        assert_eq!(
            parse_seq_spec("--seq", "1..1099511627776").unwrap().len(),
            41
        );
        assert_eq!(
            parse_seq_spec("--seq", "3..1099511627776").unwrap().len(),
            39
        );
    }

    /// Class 5 of issue 10: a spec of 2^40 lengths is refused at once, from its count.
    #[test]
    fn a_huge_spec_is_counted_not_expanded() {
        let t = std::time::Instant::now();
        let e = parse_seq_spec("--seq", "1..1099511627776:+1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("expands to 1099511627776 lengths"), "{e}");
        assert!(t.elapsed().as_secs_f64() < 1.0);
        assert_eq!(
            parse_seq_spec("--seq", "1..1000000:+1").unwrap().len(),
            1_000_000
        );
    }
}
