//! How numbers and times read on the page.

use cwsandbox_sim::time::SimTime;

/// `2026-12-08 01:02:03` (UTC), as sacct prints times.
pub fn time(at: SimTime) -> String {
    chrono::DateTime::from_timestamp_millis(at.millis())
        .map(|time| time.format("%Y-%m-%dT%H:%M:%S").to_string())
        .unwrap_or_else(|| at.secs().to_string())
}

/// `1-02:03:04`, `2:03:04`, `3:04`: Slurm's elapsed form.
pub fn elapsed(seconds: i64) -> String {
    let seconds = seconds.max(0);
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    let (hours, rest) = (rest / 3600, rest % 3600);
    let (minutes, seconds) = (rest / 60, rest % 60);
    if days > 0 {
        format!("{days}-{hours:02}:{minutes:02}:{seconds:02}")
    } else if hours > 0 {
        format!("{hours}:{minutes:02}:{seconds:02}")
    } else {
        format!("{minutes}:{seconds:02}")
    }
}

/// Millicores as CPUs: `15.5`, `1`, `0.25`.
pub fn cpus(millis: i64) -> String {
    if millis % 1000 == 0 { (millis / 1000).to_string() } else { format!("{}", millis as f64 / 1000.0) }
}

/// Bytes in binary units: `60Gi`, `512Mi`.
pub fn bytes(bytes: i64) -> String {
    const UNITS: [(&str, i64); 4] = [("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)];
    for (unit, size) in UNITS {
        if bytes >= size {
            let value = bytes as f64 / size as f64;
            return if bytes % size == 0 { format!("{}{unit}", bytes / size) } else { format!("{value:.1}{unit}") };
        }
    }
    format!("{bytes}")
}

/// A share of a whole as a CSS width, to one decimal.
pub fn percent(part: i64, whole: i64) -> String {
    if whole <= 0 {
        return "0%".to_owned();
    }
    format!("{:.1}%", (part.max(0) as f64 * 100.0 / whole as f64).min(100.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_kubectl_and_slurm_print_them() {
        assert_eq!(elapsed(59), "0:59");
        assert_eq!(elapsed(3 * 3600 + 4 * 60 + 5), "3:04:05");
        assert_eq!(elapsed(86_400 + 1), "1-00:00:01");
        assert_eq!(cpus(15_500), "15.5");
        assert_eq!(cpus(2000), "2");
        assert_eq!(bytes(60 << 30), "60Gi");
        assert_eq!(bytes(3 << 29), "1.5Gi");
        assert_eq!(percent(1, 4), "25.0%");
        assert_eq!(percent(5, 0), "0%");
        assert_eq!(time(SimTime::from_secs(1_764_480_000)), "2025-11-30T05:20:00");
    }
}
