//! Message sizes: parsing `8`, `64K`, `1G`, and the nccl-tests sweep.

/// Parses a byte count with an optional K, M or G suffix (powers of 1024,
/// as nccl-tests does), case-insensitive, e.g. `8`, `64K`, `256M`, `1G`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty size".into());
    }
    let (digits, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        Some('B') if t.len() > 1 => return parse_size(&t[..t.len() - 1]),
        _ => (t, 1),
    };
    let v: u64 = digits
        .trim()
        .parse()
        .map_err(|_| format!("not a size: {s:?} (use e.g. 8, 64K, 256M, 1G)"))?;
    v.checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} overflows"))
}

/// The sizes of a sweep from `min` to `max` inclusive: multiplied by
/// `factor`, or stepped by `increment` when that is given (as `-i`).
pub fn sweep(min: u64, max: u64, factor: u64, increment: Option<u64>) -> Result<Vec<u64>, String> {
    if min > max {
        return Err(format!("minimum size {min} is above the maximum {max}"));
    }
    let mut v = Vec::new();
    let mut s = min;
    match increment {
        Some(0) => return Err("increment must be positive".into()),
        Some(i) => {
            while s <= max {
                v.push(s);
                s = match s.checked_add(i) {
                    Some(x) => x,
                    None => break,
                };
            }
        }
        None => {
            if factor < 2 {
                return Err("factor must be at least 2".into());
            }
            if min == 0 {
                return Err("with a factor, the minimum size must be positive".into());
            }
            while s <= max {
                v.push(s);
                s = match s.checked_mul(factor) {
                    Some(x) => x,
                    None => break,
                };
            }
        }
    }
    Ok(v)
}

/// `bytes` with the largest binary suffix that divides it: `256M`, `8`, `1G`.
pub fn human(bytes: u64) -> String {
    for (shift, suffix) in [(30, "G"), (20, "M"), (10, "K")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_suffixes() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("64k"), Ok(65536));
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("4GB"), Ok(4 << 30));
        assert!(parse_size("").is_err());
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("K").is_err());
        assert!(parse_size("99999999999999G").is_err());
    }

    #[test]
    fn sweeps() {
        assert_eq!(sweep(8, 128, 4, None).unwrap(), vec![8, 32, 128]);
        assert_eq!(sweep(8, 100, 4, None).unwrap(), vec![8, 32]);
        assert_eq!(sweep(10, 40, 2, Some(10)).unwrap(), vec![10, 20, 30, 40]);
        assert_eq!(sweep(1 << 30, 1 << 30, 2, None).unwrap(), vec![1 << 30]);
        assert!(sweep(9, 8, 2, None).is_err());
        assert!(sweep(8, 9, 1, None).is_err());
        assert!(sweep(8, 9, 2, Some(0)).is_err());
        assert_eq!(sweep(u64::MAX / 2, u64::MAX, 4, None).unwrap().len(), 1);
    }

    #[test]
    fn human_sizes_parse_back() {
        for b in [8u64, 1000, 4096, 256 << 20, 1 << 30, 3 << 10] {
            assert_eq!(parse_size(&human(b)).unwrap(), b);
        }
        assert_eq!(human(256 << 20), "256M");
    }
}
