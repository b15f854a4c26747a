//! How the pages write numbers, money, durations and times. Times are UTC: the server
//! renders the page and does not know the reader's time zone.

/// `12345` → `12,345`.
pub fn tokens(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// An axis label: `0`, `850`, `2.5k`, `40k`, `1.2M`.
pub fn short_tokens(n: u64) -> String {
    let (value, unit) = match n {
        0..=999 => return n.to_string(),
        1_000..=999_999 => (n as f64 / 1e3, "k"),
        _ => (n as f64 / 1e6, "M"),
    };
    let text = format!("{value:.1}");
    format!("{}{unit}", text.trim_end_matches(".0"))
}

/// Dollars: four decimals below a dollar (a request costs cents), two above.
pub fn usd(x: f64) -> String {
    let sign = if x < 0.0 { "−" } else { "" };
    let x = x.abs();
    if x < 1.0 {
        format!("{sign}${x:.4}")
    } else {
        format!("{sign}${x:.2}")
    }
}

/// `0.724` → `72%`; `None` (nothing sent) → an en dash.
pub fn percent(ratio: Option<f64>) -> String {
    ratio.map_or_else(|| "–".into(), |r| format!("{:.0}%", r * 100.0))
}

/// A gap or a span: `850 ms`, `42 s`, `5m 12s`, `1h 05m`, `3d 4h`.
pub fn duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0 => format!("{ms} ms"),
        1..=59 => format!("{s} s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

fn strftime(ms: u64, format: &str) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(|| "?".into(), |t| t.strftime(format).to_string())
}

/// `2026-11-21 14:03:07 UTC`.
pub fn datetime(ms: u64) -> String {
    strftime(ms, "%Y-%m-%d %H:%M:%S UTC")
}

/// `14:03:07`, or `11-21 14:03:07` when the session spans more than one day.
pub fn clock(ms: u64, with_date: bool) -> String {
    strftime(
        ms,
        if with_date {
            "%m-%d %H:%M:%S"
        } else {
            "%H:%M:%S"
        },
    )
}

/// Whether two times fall on different UTC days.
pub fn different_days(a: u64, b: u64) -> bool {
    a / 86_400_000 != b / 86_400_000
}

/// `5 min ago`, for the overview's last activity.
pub fn ago(then: u64, now: u64) -> String {
    if then > now {
        return "just now".into();
    }
    let ms = now - then;
    if ms < 60_000 {
        return format!("{} s ago", ms / 1000);
    }
    // The largest unit is enough: `5m ago`, `2h ago`, `3d ago`.
    let text = duration(ms);
    format!("{} ago", text.split(' ').next().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_people_write_them() {
        assert_eq!(tokens(0), "0");
        assert_eq!(tokens(999), "999");
        assert_eq!(tokens(1000), "1,000");
        assert_eq!(tokens(1_234_567), "1,234,567");
        assert_eq!(short_tokens(850), "850");
        assert_eq!(short_tokens(2500), "2.5k");
        assert_eq!(short_tokens(40_000), "40k");
        assert_eq!(short_tokens(1_200_000), "1.2M");
        assert_eq!(usd(0.05341), "$0.0534");
        assert_eq!(usd(-0.0042), "−$0.0042");
        assert_eq!(usd(12.345), "$12.35");
        assert_eq!(percent(Some(0.724)), "72%");
        assert_eq!(percent(None), "–");
    }

    #[test]
    fn durations_and_times() {
        assert_eq!(duration(850), "850 ms");
        assert_eq!(duration(42_000), "42 s");
        assert_eq!(duration(312_000), "5m 12s");
        assert_eq!(duration(3_900_000), "1h 05m");
        assert_eq!(duration(3 * 86_400_000 + 4 * 3_600_000), "3d 4h");
        // 2026-11-21 14:03:07 UTC
        let t = 1_795_269_787_000;
        assert_eq!(datetime(t), "2026-11-21 14:03:07 UTC");
        assert_eq!(clock(t, false), "14:03:07");
        assert_eq!(clock(t, true), "11-21 14:03:07");
        assert!(different_days(t, t + 10 * 3_600_000));
        assert!(!different_days(t, t + 3_600_000));
        assert_eq!(ago(t, t + 312_000), "5m ago");
        assert_eq!(ago(t, t + 42_000), "42 s ago");
        assert_eq!(ago(t + 5, t), "just now");
    }
}
