//! Choria's extended duration syntax (`go-choria:internal/util/util.go` `ParseDuration`).
//!
//! The last character selects the unit: `w`/`W` weeks, `d`/`D` days, `M` 30-day
//! months, `y`/`Y` 365-day years, each with an optional fractional prefix (`1.5d`);
//! anything ending in `s`, `S`, `m`, `h` or `H` goes to Go's `time.ParseDuration`
//! rules (`1h30m`, `90s`, `500ms`). Everything else (`10`, `5min`, `1x`) is an error.
//! The empty string is zero, as in Go.
//!
//! Like Go's `time.Duration`, a duration is at most `i64::MAX` nanoseconds (about
//! 292 years, [`MAX_DURATION`]); larger values are refused, so that every later
//! sum, product or conversion to nanoseconds of a configured duration stays in range.

use std::time::Duration;

/// Why a duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {}: {reason}", crate::untrusted::quoted(.input))]
pub struct DurationError {
    input: String,
    reason: &'static str,
}

const DAY: f64 = 24.0 * 3600.0;

/// The longest duration accepted: `i64::MAX` nanoseconds, Go's maximum
/// (2562047h47m16.854775807s, about 292 years).
pub const MAX_DURATION: Duration = Duration::from_nanos(i64::MAX as u64);

const OUT_OF_RANGE: &str = "out of range, at most 2562047h (about 292 years)";

/// Parses a Choria duration such as `1m`, `1h30m`, `1.5d`, `2w`, `1M` or `1y`.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let err = |reason| DurationError {
        input: input.to_string(),
        reason,
    };
    if input.is_empty() {
        return Ok(Duration::ZERO);
    }
    let last = input.chars().last().unwrap_or(' ');
    let scale = match last {
        'w' | 'W' => Some(7.0 * DAY),
        'd' | 'D' => Some(DAY),
        'M' => Some(30.0 * DAY),
        'y' | 'Y' => Some(365.0 * DAY),
        's' | 'S' | 'm' | 'h' | 'H' => None,
        _ => return Err(err("invalid time unit, use one of s, m, h, d, w, M or y")),
    };
    match scale {
        Some(seconds) => {
            let number = &input[..input.len() - last.len_utf8()];
            let value: f64 = parse_plain_float(number).ok_or_else(|| err("invalid number"))?;
            seconds_to_duration(value * seconds).ok_or_else(|| err(OUT_OF_RANGE))
        }
        None => parse_go_duration(input).map_err(err),
    }
}

/// A float as Go's `strconv.ParseFloat` accepts it for this purpose: digits with an
/// optional fraction, no sign, no exponent, no spaces.
fn parse_plain_float(text: &str) -> Option<f64> {
    let valid = !text.is_empty()
        && text.chars().all(|c| c.is_ascii_digit() || c == '.')
        && text.chars().filter(|&c| c == '.').count() <= 1
        && text != ".";
    if valid {
        text.parse().ok()
    } else {
        None
    }
}

fn seconds_to_duration(seconds: f64) -> Option<Duration> {
    if seconds.is_finite() && (0.0..=MAX_DURATION.as_secs_f64()).contains(&seconds) {
        // The float nearest the maximum is a few hundred nanoseconds above it.
        Some(Duration::from_secs_f64(seconds).min(MAX_DURATION))
    } else {
        None
    }
}

/// Go's `time.ParseDuration` for non-negative values: a sequence of decimal numbers,
/// each with an optional fraction and a unit among `ns us µs ms s m h`.
fn parse_go_duration(input: &str) -> Result<Duration, &'static str> {
    let mut rest = input.strip_prefix('+').unwrap_or(input);
    if rest.starts_with('-') {
        return Err("negative durations are not allowed");
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or("missing unit")?;
        if number_len == 0 {
            return Err("expected a number");
        }
        let value = parse_plain_float(&rest[..number_len]).ok_or("invalid number")?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err("invalid time unit, use one of s, m, h, d, w, M or y"),
        };
        total += value * unit;
        rest = &rest[unit_len..];
    }
    seconds_to_duration(total).ok_or(OUT_OF_RANGE)
}

/// Formats a duration the way operators write them (`1m`, `1h30m`, `365d`), for
/// `check` output and log lines.
pub fn format_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if d.subsec_nanos() != 0 {
        return format!("{}ms", d.as_millis());
    }
    if secs == 0 {
        return "0s".into();
    }
    if secs % 86_400 == 0 {
        return format!("{}d", secs / 86_400);
    }
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 {
        out.push_str(&format!("{s}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn the_duration_table() {
        let ok: &[(&str, Duration)] = &[
            ("", Duration::ZERO),
            ("1m", secs(60.0)),
            ("90s", secs(90.0)),
            ("500ms", secs(0.5)),
            ("1h30m", secs(5400.0)),
            ("1.5h", secs(5400.0)),
            ("1d", secs(86_400.0)),
            ("1.5d", secs(129_600.0)),
            ("2D", secs(172_800.0)),
            ("2w", secs(1_209_600.0)),
            ("1W", secs(604_800.0)),
            ("1M", secs(2_592_000.0)),
            ("1y", secs(31_536_000.0)),
            ("1Y", secs(31_536_000.0)),
            ("5m", secs(300.0)),
        ];
        for (input, want) in ok {
            assert_eq!(parse_duration(input).as_ref(), Ok(want), "{input}");
        }
        for bad in [
            "10", "5min", "1x", "m", "d", "1..5d", "-1m", "1H", "5S", "abc", "1 m", "0",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn durations_beyond_go_s_maximum_are_refused_not_wrapped() {
        for big in [
            "99999999999h",
            "2562048h",
            "300y",
            "16000w",
            "110000d",
            "9223372037s",
            "99999999999999999999999999999999999999d",
            "2562047h47m17s",
            "1000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000h",
        ] {
            let e = parse_duration(big).unwrap_err().to_string();
            assert!(e.contains("out of range, at most 2562047h"), "{big}: {e}");
        }
        assert_eq!(parse_duration("2562047h"), Ok(secs(2_562_047.0 * 3600.0)));
        assert_eq!(parse_duration("292y"), Ok(secs(292.0 * 365.0 * 86_400.0)));
        let max = parse_duration("2562047h47m16.854775807s").unwrap();
        assert!(max <= MAX_DURATION && max > MAX_DURATION - Duration::from_millis(1));
        // What the daemon then does with a configured duration stays in range.
        let now = std::time::Instant::now();
        let _ = now + max + max;
        assert!(i64::try_from(max.as_nanos()).is_ok());
        assert!(max.checked_mul(2).is_some());
    }

    #[test]
    fn error_names_the_input() {
        let e = parse_duration("5min").unwrap_err().to_string();
        assert!(e.contains("\"5min\""), "{e}");
        assert!(e.contains("invalid time unit"), "{e}");
    }

    #[test]
    fn formats_for_humans() {
        assert_eq!(format_duration(secs(60.0)), "1m");
        assert_eq!(format_duration(secs(5400.0)), "1h30m");
        assert_eq!(format_duration(secs(31_536_000.0)), "365d");
        assert_eq!(format_duration(secs(0.5)), "500ms");
    }
}
