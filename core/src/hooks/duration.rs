//! Go's `time.ParseDuration`, exactly: Velero stores hook timeouts as `metav1.Duration` strings,
//! so `"1h30m"`, `".5s"`, `"300ms"`, `"0"` and `"-1s"` must mean what they mean to Velero.

use std::time::Duration;

/// Why a value is not a usable duration (docs/behaviour.md §2.3, §3.4 row 4); each variant holds
/// the value as written, and its message says how to write it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("invalid duration {0:?}: expected a Go duration such as \"30s\", \"5m\" or \"1h30m\"")]
    /// Not Go's grammar at all (empty, stray characters, a lone `.`).
    Invalid(String),
    #[error(
        "invalid duration {0:?}: missing unit (use ns, us, ms, s, m or h; a bare number other than 0 is not a duration)"
    )]
    /// A number without a unit, such as `5` (only a bare `0` is a duration).
    MissingUnit(String),
    #[error(
        "invalid duration {value:?}: unknown unit {unit:?} (use ns, us, ms, s, m or h; there is no \"d\")"
    )]
    /// A unit Go does not know, such as `d`.
    UnknownUnit {
        /// The whole value as written.
        value: String,
        /// The unknown unit.
        unit: String,
    },
    #[error("invalid duration {0:?}: out of range (at most about 2562047h)")]
    /// Longer than an `i64` of nanoseconds (about 2562047h), as in Go.
    Overflow(String),
    #[error("invalid duration {0:?}: must not be negative")]
    /// A valid Go duration below zero: invalid for hook timeouts and flags.
    Negative(String),
}

/// Parses a Go duration into signed nanoseconds, with Go's grammar, units and overflow rules.
pub fn parse_go_duration(input: &str) -> Result<i64, DurationError> {
    let invalid = || DurationError::Invalid(input.to_string());
    let overflow = || DurationError::Overflow(input.to_string());
    let mut s = input.as_bytes();
    let mut neg = false;
    if let Some(&c) = s.first()
        && (c == b'-' || c == b'+')
    {
        neg = c == b'-';
        s = &s[1..];
    }
    if s == b"0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !s.is_empty() {
        if !(s[0] == b'.' || s[0].is_ascii_digit()) {
            return Err(invalid());
        }
        // Integer part.
        let digits = s.iter().take_while(|c| c.is_ascii_digit()).count();
        let mut v: u64 = 0;
        for &c in &s[..digits] {
            if v > (1u64 << 63) / 10 {
                return Err(overflow());
            }
            v = v * 10 + u64::from(c - b'0');
            if v > 1u64 << 63 {
                return Err(overflow());
            }
        }
        let pre = digits > 0;
        s = &s[digits..];
        // Fraction part: digits past what fits are ignored, as Go does.
        let mut frac: u64 = 0;
        let mut scale: f64 = 1.0;
        let mut post = false;
        if s.first() == Some(&b'.') {
            s = &s[1..];
            let fdigits = s.iter().take_while(|c| c.is_ascii_digit()).count();
            let mut overflowed = false;
            for &c in &s[..fdigits] {
                if overflowed {
                    continue;
                }
                if frac > (1u64 << 63) / 10 {
                    overflowed = true;
                    continue;
                }
                let y = frac * 10 + u64::from(c - b'0');
                if y > 1u64 << 63 {
                    overflowed = true;
                    continue;
                }
                frac = y;
                scale *= 10.0;
            }
            post = fdigits > 0;
            s = &s[fdigits..];
        }
        if !pre && !post {
            return Err(invalid());
        }
        let unit_len = s
            .iter()
            .take_while(|c| **c != b'.' && !c.is_ascii_digit())
            .count();
        if unit_len == 0 {
            return Err(DurationError::MissingUnit(input.to_string()));
        }
        let unit_str = &s[..unit_len];
        let unit: u64 = match unit_str {
            b"ns" => 1,
            // "µs" (U+00B5) and "μs" (U+03BC), as UTF-8.
            b"us" | [0xC2, 0xB5, b's'] | [0xCE, 0xBC, b's'] => 1_000,
            b"ms" => 1_000_000,
            b"s" => 1_000_000_000,
            b"m" => 60_000_000_000,
            b"h" => 3_600_000_000_000,
            _ => {
                return Err(DurationError::UnknownUnit {
                    value: input.to_string(),
                    unit: String::from_utf8_lossy(unit_str).into_owned(),
                });
            }
        };
        s = &s[unit_len..];
        if v > (1u64 << 63) / unit {
            return Err(overflow());
        }
        v *= unit;
        if frac > 0 {
            v += (frac as f64 * (unit as f64 / scale)) as u64;
            if v > 1u64 << 63 {
                return Err(overflow());
            }
        }
        total = total.checked_add(v).ok_or_else(overflow)?;
        if total > 1u64 << 63 {
            return Err(overflow());
        }
    }
    if neg {
        return Ok((total as i128).wrapping_neg() as i64);
    }
    if total > (1u64 << 63) - 1 {
        return Err(overflow());
    }
    Ok(total as i64)
}

/// A Go duration that must not be negative (hook timeouts, CLI flags).
pub fn parse_non_negative(input: &str) -> Result<Duration, DurationError> {
    let nanos = parse_go_duration(input)?;
    if nanos < 0 {
        return Err(DurationError::Negative(input.to_string()));
    }
    Ok(Duration::from_nanos(nanos as u64))
}

/// For clap: `--flag 10s`.
pub fn parse_flag(input: &str) -> Result<Duration, String> {
    parse_non_negative(input).map_err(|e| e.to_string())
}

/// A duration as Go prints it (`30s`, `1m0s`, `1.5s`, `250ms`, `1h0m0s`): the spelling operators
/// wrote in the hook definitions, for messages.
pub fn format_go_duration(ms: u64) -> String {
    if ms == 0 {
        return "0s".to_string();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (h, rest) = (ms / 3_600_000, ms % 3_600_000);
    let (m, rest) = (rest / 60_000, rest % 60_000);
    let (s, frac) = (rest / 1000, rest % 1000);
    let secs = if frac == 0 {
        format!("{s}s")
    } else {
        let f = format!("{frac:03}");
        format!("{s}.{}s", f.trim_end_matches('0'))
    };
    if h > 0 {
        format!("{h}h{m}m{secs}")
    } else if m > 0 {
        format!("{m}m{secs}")
    } else {
        secs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn durations_print_like_go() {
        for (ms, s) in [
            (0, "0s"),
            (250, "250ms"),
            (1500, "1.5s"),
            (30_000, "30s"),
            (60_000, "1m0s"),
            (90_500, "1m30.5s"),
            (3_600_000, "1h0m0s"),
        ] {
            assert_eq!(format_go_duration(ms), s);
            assert_eq!(
                parse_go_duration(s).unwrap(),
                ms as i64 * 1_000_000,
                "{s} round-trips"
            );
        }
    }

    #[test]
    fn accepts_what_go_accepts() {
        let cases: &[(&str, i64)] = &[
            ("0", 0),
            ("-0", 0),
            ("+0", 0),
            ("5s", 5 * S),
            ("30s", 30 * S),
            ("1478s", 1478 * S),
            ("-5s", -5 * S),
            ("+5s", 5 * S),
            ("-0s", 0),
            ("0s", 0),
            ("5.0s", 5 * S),
            ("5.6s", 5 * S + 600_000_000),
            ("5.s", 5 * S),
            (".5s", S / 2),
            ("1.0s", S),
            ("1.00s", S),
            ("1.004s", S + 4_000_000),
            ("1.0040s", S + 4_000_000),
            ("100.00100s", 100 * S + 1_000_000),
            ("10ns", 10),
            ("11us", 11_000),
            ("12µs", 12_000),
            ("12μs", 12_000),
            ("13ms", 13_000_000),
            ("14s", 14 * S),
            ("15m", 15 * 60 * S),
            ("16h", 16 * 3600 * S),
            ("3h30m", (3 * 3600 + 30 * 60) * S),
            ("1h30m", 5400 * S),
            ("10.5s4m", 4 * 60 * S + 10 * S + S / 2),
            ("-2m3.4s", -(2 * 60 * S + 3 * S + 400_000_000)),
            (
                "1h2m3s4ms5us6ns",
                3600 * S + 2 * 60 * S + 3 * S + 4_000_000 + 5_000 + 6,
            ),
            (
                "39h9m14.425s",
                39 * 3600 * S + 9 * 60 * S + 14 * S + 425_000_000,
            ),
            ("52763797000ns", 52_763_797_000),
            ("0.3333333333333333333h", 20 * 60 * S),
            ("9007199254740993ns", 9_007_199_254_740_993),
            ("9223372036854775807ns", i64::MAX),
            ("9223372036854775.807us", i64::MAX),
            ("-9223372036854775808ns", i64::MIN),
            ("0.100000000000000000000h", 6 * 60 * S),
        ];
        for (input, want) in cases {
            assert_eq!(parse_go_duration(input), Ok(*want), "input {input:?}");
        }
    }

    #[test]
    fn rejects_what_go_rejects() {
        for input in [
            "", "3", "-", "s", ".", "-.", ".s", "+.s", "1d", "1 s", " 1s", "1s ", "1.2.3s", "-1",
            "1x", "1ss", "1sm", "1e3s", "1,5s", "∞s", "1s-1s",
        ] {
            assert!(
                parse_go_duration(input).is_err(),
                "input {input:?} should be rejected"
            );
        }
        for input in [
            "9223372036854775808ns",
            "9223372036854775.808us",
            "9223372036854ms775us808ns",
            "3000000h",
            "-9223372036854775809ns",
        ] {
            assert_eq!(
                parse_go_duration(input),
                Err(DurationError::Overflow(input.into())),
                "input {input:?}"
            );
        }
    }

    #[test]
    fn error_messages_say_how_to_fix() {
        assert!(matches!(
            parse_go_duration("10"),
            Err(DurationError::MissingUnit(_))
        ));
        let e = parse_go_duration("1d").unwrap_err().to_string();
        assert!(e.contains("unknown unit \"d\""), "{e}");
        assert_eq!(
            parse_non_negative("-1s"),
            Err(DurationError::Negative("-1s".into()))
        );
        assert_eq!(parse_non_negative("1m"), Ok(Duration::from_secs(60)));
    }
}
