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

/// Binary suffixes: the multiplier is `2^shift` base units.
const BINARY_SUFFIXES: &[(&str, u32)] = &[("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40), ("Pi", 50), ("Ei", 60)];

/// Decimal suffixes: the multiplier is `10^exponent` base units.
const DECIMAL_SUFFIXES: &[(&str, i32)] =
    &[("n", -9), ("u", -6), ("m", -3), ("k", 3), ("M", 6), ("G", 9), ("T", 12), ("P", 15), ("E", 18)];

const LIMIT_MILLI: i128 = 9_200_000_000_000_000_000;

/// Most digits a number may have: below 10^36, so that every step below fits in a `u128`.
const MAX_DIGITS: usize = 36;

/// `ceil(mantissa × 2^shift / 10^k)`, exactly, or `None` when it does not fit.
///
/// The product can exceed 128 bits while the quotient is small ("0.000…1Ei"), so the division is
/// done on the quotient and the remainder of `mantissa / 10^k` separately.
fn scaled_down(mantissa: u128, shift: u32, k: u32) -> Option<u128> {
    let (mut mantissa, mut k) = (mantissa, k);
    // 10^38 is the largest power of ten in a u128. Deeper divisions happen only without a binary
    // suffix (a binary suffix allows no exponent and the fraction has at most 36 digits), where
    // ceil(ceil(x / a) / b) = ceil(x / ab) makes dividing in two steps exact.
    if k > 38 {
        let first = 10u128.pow((k - 38).min(38));
        mantissa = mantissa / first + u128::from(mantissa % first != 0);
        k = 38;
    }
    let divisor = 10u128.pow(k);
    let (whole, mut remainder) = (mantissa / divisor, mantissa % divisor);
    let high = whole.checked_mul(1u128 << shift)?;
    // Long division of remainder × 2^shift by the divisor, one bit at a time; the remainder stays
    // below the divisor (≤ 10^38), so doubling it fits.
    let mut low: u128 = 0;
    for _ in 0..shift {
        low <<= 1;
        remainder <<= 1;
        if remainder >= divisor {
            remainder -= divisor;
            low += 1;
        }
    }
    high.checked_add(low)?.checked_add(u128::from(remainder != 0))
}

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
        let number_end = unsigned.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(unsigned.len());
        let (number, suffix) = unsigned.split_at(number_end);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(error("no number"));
        }
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.len() + fraction.len() > MAX_DIGITS {
            return Err(error("number too long"));
        }
        // At most 36 ASCII digits: below 10^36, no overflow.
        let mantissa: u128 =
            whole.bytes().chain(fraction.bytes()).fold(0u128, |value, digit| value * 10 + u128::from(digit - b'0'));
        // The suffix table first: "Ei" and "E" are suffixes, "E3" and "e3" exponents.
        let (shift, exponent) = if suffix.is_empty() {
            (0, 0)
        } else if let Some((_, shift)) = BINARY_SUFFIXES.iter().find(|(name, _)| *name == suffix) {
            (*shift, 0)
        } else if let Some((_, exponent)) = DECIMAL_SUFFIXES.iter().find(|(name, _)| *name == suffix) {
            (0, *exponent)
        } else if let Some(exponent) = suffix.strip_prefix(['e', 'E']).filter(|e| !e.is_empty()) {
            let exponent: i32 = exponent.parse().map_err(|_| error("bad exponent"))?;
            if exponent.unsigned_abs() > 18 {
                return Err(error("exponent out of range"));
            }
            (0, exponent)
        } else {
            return Err(error("unknown suffix"));
        };
        // value in millis = mantissa × 2^shift × 10^(3 + exponent − fraction digits), rounded up
        // as Kubernetes rounds sub-milli precision.
        let power = 3 + exponent - fraction.len() as i32;
        let milli = if power >= 0 {
            mantissa.checked_mul(1u128 << shift).and_then(|value| value.checked_mul(10u128.pow(power.unsigned_abs())))
        } else {
            scaled_down(mantissa, shift, power.unsigned_abs())
        };
        match milli {
            Some(milli) if milli <= LIMIT_MILLI as u128 => Ok(Quantity { milli: milli as i128 }),
            _ => Err(error("too large")),
        }
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
    fn binary_exa_suffix_is_a_suffix_not_an_exponent() {
        // Was read as the exponent "i" and refused as "bad exponent".
        assert_eq!(Quantity::parse("0.001Ei").unwrap().units_ceil(), (1i64 << 60) / 1000 + 1);
        assert_eq!(Quantity::parse("0Ei").unwrap(), Quantity::ZERO);
        assert_eq!(Quantity::parse("1Ei").unwrap_err().why, "too large");
        assert_eq!(millis("1E-3"), 1, "E followed by a number is still an exponent");
    }

    #[test]
    fn extreme_precision_neither_overflows_nor_loses_the_rounding() {
        // The denominator 10^33 × 10^18 overflowed i128 (a panic in debug builds).
        assert_eq!(millis("0.000000000000000000000000000000001e-18"), 1);
        // mantissa × 1000 fit in i128 but adding the rounding term overflowed.
        assert_eq!(Quantity::parse("170141183460469231731687303.715884105").unwrap_err().why, "too large");
        // mantissa × 2^60 exceeds 128 bits while the value is small: exact anyway.
        let bytes = Quantity::parse("0.000000000000000000000000000001Ei").unwrap().units_ceil();
        assert_eq!(bytes, 1, "1.15e-12 bytes rounds up to one milli-byte, one byte");
    }

    #[test]
    fn rejects_nonsense() {
        for text in ["", "-1", "abc", "1.2.3", "5Xi", "1e", "1e99", "."] {
            assert!(Quantity::parse(text).is_err(), "{text:?} must be refused");
        }
    }
}
