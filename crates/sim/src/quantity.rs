//! Kubernetes resource quantities ("500m", "2", "512Mi", "1.5G", "1e3"), parsed exactly into
//! integer millicores or bytes, and printed back in canonical form.

use std::fmt;

/// Why a quantity string was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {text:?}: {why}")]
pub struct QuantityError {
    /// The offending text.
    pub text: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// A non-negative quantity in thousandths of its base unit (millicores for CPU, millibytes for
/// memory, which keeps "0.5Mi" and "100m" exact). Values beyond ~9.2e15 base units are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Quantity {
    milli: i128,
}

const SUFFIXES: &[(&str, i128, i128)] = &[
    // (suffix, numerator, denominator) of the multiplier in base units.
    ("Ki", 1 << 10, 1),
    ("Mi", 1 << 20, 1),
    ("Gi", 1 << 30, 1),
    ("Ti", 1 << 40, 1),
    ("Pi", 1 << 50, 1),
    ("Ei", 1 << 60, 1),
    ("n", 1, 1_000_000_000),
    ("u", 1, 1_000_000),
    ("m", 1, 1_000),
    ("k", 1_000, 1),
    ("M", 1_000_000, 1),
    ("G", 1_000_000_000, 1),
    ("T", 1_000_000_000_000, 1),
    ("P", 1_000_000_000_000_000, 1),
    ("E", 1_000_000_000_000_000_000, 1),
];

const LIMIT_MILLI: i128 = 9_200_000_000_000_000_000;

impl Quantity {
    /// Zero.
    pub const ZERO: Quantity = Quantity { milli: 0 };

    /// Parses a Kubernetes quantity. Negative values are refused: no resource here is negative.
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        let error = |why| QuantityError { text: text.to_owned(), why };
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(error("empty"));
        }
        let unsigned = trimmed.strip_prefix('+').unwrap_or(trimmed);
        if unsigned.starts_with('-') {
            return Err(error("negative"));
        }
        let number_end = unsigned
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(unsigned.len());
        let (number, suffix) = unsigned.split_at(number_end);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(error("no number"));
        }
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.len() + fraction.len() > 36 {
            return Err(error("number too long"));
        }
        // Digits are ASCII and at most 36 of them, so this neither allocates nor overflows i128.
        let mantissa: i128 =
            whole.bytes().chain(fraction.bytes()).fold(0i128, |value, digit| value * 10 + i128::from(digit - b'0'));
        let mut denominator: i128 = 10i128.checked_pow(fraction.len() as u32).ok_or_else(|| error("too many decimals"))?;
        let mut numerator: i128 = 1;
        if let Some(exponent) = suffix.strip_prefix(['e', 'E']).filter(|e| !e.is_empty()) {
            let exponent: i32 = exponent.parse().map_err(|_| error("bad exponent"))?;
            if exponent.unsigned_abs() > 18 {
                return Err(error("exponent out of range"));
            }
            let scale = 10i128.pow(exponent.unsigned_abs());
            if exponent >= 0 { numerator *= scale } else { denominator *= scale }
        } else if !suffix.is_empty() {
            let (_, multiplier, divisor) =
                SUFFIXES.iter().find(|(name, _, _)| *name == suffix).ok_or_else(|| error("unknown suffix"))?;
            numerator *= multiplier;
            denominator *= divisor;
        }
        let scaled = mantissa
            .checked_mul(numerator)
            .and_then(|value| value.checked_mul(1000))
            .ok_or_else(|| error("too large"))?;
        // Round up, as Kubernetes does for sub-milli precision.
        let milli = (scaled + denominator - 1) / denominator;
        if milli > LIMIT_MILLI {
            return Err(error("too large"));
        }
        Ok(Quantity { milli })
    }

    /// From whole millicores (CPU).
    pub fn from_millis(millis: i64) -> Quantity {
        Quantity { milli: i128::from(millis.max(0)) }
    }

    /// From whole base units (cores, bytes, GPUs).
    pub fn from_units(units: i64) -> Quantity {
        Quantity { milli: i128::from(units.max(0)) * 1000 }
    }

    /// In thousandths of the base unit (millicores for CPU).
    pub fn millis(self) -> i64 {
        self.milli as i64
    }

    /// In base units, rounded up (bytes for memory, GPUs).
    pub fn units_ceil(self) -> i64 {
        ((self.milli + 999) / 1000) as i64
    }

    /// Whether it is zero.
    pub fn is_zero(self) -> bool {
        self.milli == 0
    }

    /// The sum, saturating at the largest representable quantity.
    pub fn saturating_add(self, other: Quantity) -> Quantity {
        Quantity { milli: (self.milli + other.milli).min(LIMIT_MILLI) }
    }

    /// The difference, floored at zero.
    pub fn saturating_sub(self, other: Quantity) -> Quantity {
        Quantity { milli: (self.milli - other.milli).max(0) }
    }
}

impl fmt::Display for Quantity {
    /// Canonical CPU-style text: whole units when exact ("2"), otherwise millis ("500m").
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.milli % 1000 == 0 { write!(f, "{}", self.milli / 1000) } else { write!(f, "{}m", self.milli) }
    }
}

/// Memory in bytes printed the way Kubernetes prints binary quantities ("512Mi", "1536Mi", "2Gi"),
/// or plain bytes when no binary suffix divides it.
pub fn format_bytes(bytes: i64) -> String {
    for (suffix, shift) in [("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
        let unit = 1i64 << shift;
        if bytes != 0 && bytes % unit == 0 {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn millis(text: &str) -> i64 {
        Quantity::parse(text).unwrap().millis()
    }

    #[test]
    fn cpu_forms() {
        assert_eq!(millis("500m"), 500);
        assert_eq!(millis("2"), 2000);
        assert_eq!(millis("0.5"), 500);
        assert_eq!(millis("1.5"), 1500);
        assert_eq!(millis("100u"), 1, "sub-milli rounds up");
        assert_eq!(millis("0"), 0);
        assert_eq!(Quantity::parse("2").unwrap().to_string(), "2");
        assert_eq!(Quantity::parse("250m").unwrap().to_string(), "250m");
    }

    #[test]
    fn memory_forms() {
        let bytes = |text| Quantity::parse(text).unwrap().units_ceil();
        assert_eq!(bytes("512Mi"), 512 << 20);
        assert_eq!(bytes("1.5Gi"), 3 << 29);
        assert_eq!(bytes("1G"), 1_000_000_000);
        assert_eq!(bytes("128974848"), 128_974_848);
        assert_eq!(bytes("129e6"), 129_000_000);
        assert_eq!(bytes("1k"), 1000);
        assert_eq!(format_bytes(512 << 20), "512Mi");
        assert_eq!(format_bytes(1536 << 20), "1536Mi");
        assert_eq!(format_bytes(2 << 30), "2Gi");
        assert_eq!(format_bytes(1000), "1000");
    }

    #[test]
    fn rejects_nonsense() {
        for text in ["", "-1", "abc", "1.2.3", "5Xi", "1e", "1e99", "."] {
            assert!(Quantity::parse(text).is_err(), "{text:?} must be refused");
        }
    }
}
