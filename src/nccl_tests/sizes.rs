//! `collectives --sizes`: buffer sizes as nccl-tests takes them (`-b 8 -e 16G -f 2`): `8..16g`
//! doubles from 8 B to 16 GiB, `1m,4m,1g` lists, `k`, `m`, `g`, `t` are powers of 1024.

use crate::config::limits::{MAX_COLLECTIVE_SIZES, MAX_NCCL_SIZE_BYTES};
use crate::error::{Error, Result};

fn bad(message: String) -> Error {
    Error::arg("--sizes", message)
}

/// One size: digits and an optional binary suffix (`8`, `64k`, `16g`, `16GiB`, `1m`).
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(t);
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let (num, suffix) = t.split_at(digits);
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => {
            return Err(bad(format!(
                "'{s}': a size is a whole number with an optional k, m, g or t (powers of 1024)"
            )))
        }
    };
    let n: u64 = num
        .parse()
        .map_err(|_| bad(format!("'{s}' is not a size")))?;
    let v = n
        .checked_mul(1u64 << shift)
        .filter(|&v| (1..=MAX_NCCL_SIZE_BYTES).contains(&v))
        .ok_or_else(|| {
            bad(format!(
                "'{s}' must be from 1 B to 2^{} B",
                MAX_NCCL_SIZE_BYTES.trailing_zeros()
            ))
        })?;
    Ok(v)
}

/// A spec: comma-separated sizes and `from..to` ranges that double (as nccl-tests' `-f 2`).
pub fn parse_sizes(spec: &str) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    for part in spec.split(',') {
        if let Some((a, b)) = part.split_once("..") {
            let (mut x, to) = (parse_size(a)?, parse_size(b)?);
            if x > to {
                return Err(bad(format!("'{part}': the range runs downwards")));
            }
            while x <= to {
                if out.len() >= MAX_COLLECTIVE_SIZES {
                    return Err(bad(format!("more than {MAX_COLLECTIVE_SIZES} sizes")));
                }
                out.push(x);
                x *= 2;
            }
        } else {
            if out.len() >= MAX_COLLECTIVE_SIZES {
                return Err(bad(format!("more than {MAX_COLLECTIVE_SIZES} sizes")));
            }
            out.push(parse_size(part)?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_double_like_nccl_tests() {
        let v = parse_sizes("8..16g").unwrap();
        assert_eq!((v.len(), v[0], *v.last().unwrap()), (32, 8, 16 << 30));
        assert_eq!(
            parse_sizes("1m,4M,2GiB").unwrap(),
            [1 << 20, 4 << 20, 2 << 30]
        );
        assert!(parse_sizes("0").is_err());
        assert!(parse_sizes("16p").is_err());
        assert!(parse_sizes("1g..8").is_err());
        assert!(parse_sizes(&["1..1t"; 7].join(",")).is_err());
        assert!(parse_sizes("99999999999999999999").is_err());
    }
}
