//! DynamoDB numbers (`N`), exactly: compared and added as decimals, never
//! as floats, so `0.1 + 0.2` is `0.3` as it is in DynamoDB.
//!
//! DynamoDB numbers have "up to 38 digits of precision" and a magnitude
//! from 1E-130 to 9.9999999999999999999999999999999999999E+125
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.NamingRulesDataTypes.html#HowItWorks.DataTypes.Number>).
//! A mantissa of 38 digits fits an `i128`; a sum whose operands' exponents
//! lie too far apart to align in one is refused, never rounded.

use std::cmp::Ordering;

/// DynamoDB's precision.
const MAX_DIGITS: usize = 38;

/// A decimal `mantissa × 10^exponent`, normalized: no trailing zeros in the
/// mantissa (zero is `0 × 10^0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Number {
    mantissa: i128,
    exponent: i32,
}

impl Number {
    /// Parses DynamoDB's text form (`-12.50`, `1e3`, `+7`). `Err` says why,
    /// in words fit for a `ValidationException`.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let bad = || format!("the number {text:?} is not a valid DynamoDB number");
        let t = text.trim();
        let (negative, t) = match t.as_bytes().first() {
            Some(b'-') => (true, &t[1..]),
            Some(b'+') => (false, &t[1..]),
            _ => (false, t),
        };
        let (digits_part, exp_part) = match t.find(['e', 'E']) {
            Some(i) => (&t[..i], Some(&t[i + 1..])),
            None => (t, None),
        };
        let (int, frac) = digits_part.split_once('.').unwrap_or((digits_part, ""));
        if int.is_empty() && frac.is_empty()
            || !int.bytes().all(|b| b.is_ascii_digit())
            || !frac.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(bad());
        }
        let mut exponent: i32 = match exp_part {
            Some(e) => e.parse().map_err(|_| bad())?,
            None => 0,
        };
        let digits: String = format!("{int}{frac}");
        let digits = digits.trim_start_matches('0');
        let frac_len = i32::try_from(frac.len()).map_err(|_| bad())?;
        exponent = exponent.checked_sub(frac_len).ok_or_else(bad)?;
        // Trailing zeros move into the exponent.
        let trimmed = digits.trim_end_matches('0');
        let zeros = i32::try_from(digits.len() - trimmed.len()).map_err(|_| bad())?;
        if trimmed.is_empty() {
            return Ok(Self::ZERO);
        }
        if trimmed.len() > MAX_DIGITS {
            return Err(format!(
                "the number {text:?} has more than {MAX_DIGITS} significant digits"
            ));
        }
        let mut mantissa: i128 = trimmed.parse().map_err(|_| bad())?;
        if negative {
            mantissa = -mantissa;
        }
        let n = Self {
            mantissa,
            exponent: exponent.checked_add(zeros).ok_or_else(bad)?,
        };
        n.in_range().map_err(|_| {
            format!("the number {text:?} is outside DynamoDB's range (1E-130 to 1E+126)")
        })?;
        Ok(n)
    }

    const ZERO: Self = Self {
        mantissa: 0,
        exponent: 0,
    };

    fn digits(&self) -> i32 {
        if self.mantissa == 0 {
            return 0;
        }
        self.mantissa.unsigned_abs().ilog10() as i32 + 1
    }

    /// Magnitude order: the exponent of the leading digit (wide, so that
    /// any exponent a text can spell fits).
    fn order(&self) -> i64 {
        i64::from(self.exponent) + i64::from(self.digits()) - 1
    }

    fn in_range(&self) -> Result<(), ()> {
        if self.mantissa == 0 || (-130..=125).contains(&self.order()) {
            Ok(())
        } else {
            Err(())
        }
    }

    fn normalized(mut mantissa: i128, mut exponent: i32) -> Self {
        if mantissa == 0 {
            return Self::ZERO;
        }
        while mantissa % 10 == 0 {
            mantissa /= 10;
            exponent += 1;
        }
        Self { mantissa, exponent }
    }

    /// `self + other`, or why not (out of range, or beyond 38 digits).
    pub(crate) fn add(self, other: Self) -> Result<Self, String> {
        let too_wide = || "a sum needs more than 38 digits of precision".to_owned();
        if self.mantissa == 0 {
            return Ok(other);
        }
        if other.mantissa == 0 {
            return Ok(self);
        }
        let exponent = self.exponent.min(other.exponent);
        let align = |n: Self| -> Result<i128, String> {
            let shift = u32::try_from(n.exponent - exponent).map_err(|_| too_wide())?;
            10i128
                .checked_pow(shift)
                .and_then(|p| n.mantissa.checked_mul(p))
                .ok_or_else(too_wide)
        };
        let sum = align(self)?
            .checked_add(align(other)?)
            .ok_or_else(too_wide)?;
        let n = Self::normalized(sum, exponent);
        if n.digits() > MAX_DIGITS as i32 {
            return Err(too_wide());
        }
        n.in_range()
            .map_err(|_| "a sum is outside DynamoDB's number range".to_owned())?;
        Ok(n)
    }

    pub(crate) fn neg(self) -> Self {
        Self {
            mantissa: -self.mantissa,
            exponent: self.exponent,
        }
    }

    fn magnitude_cmp(&self, other: &Self) -> Ordering {
        match (self.mantissa == 0, other.mantissa == 0) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            _ => {}
        }
        self.order().cmp(&other.order()).then_with(|| {
            // Same leading order: compare digit strings, padded alike.
            let (a, b) = (
                self.mantissa.unsigned_abs().to_string(),
                other.mantissa.unsigned_abs().to_string(),
            );
            let width = a.len().max(b.len());
            format!("{a:0<width$}").cmp(&format!("{b:0<width$}"))
        })
    }
}

impl Ord for Number {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self.mantissa.signum(), other.mantissa.signum()) {
            (a, b) if a != b => a.cmp(&b),
            (-1, _) => other.magnitude_cmp(self),
            _ => self.magnitude_cmp(other),
        }
    }
}

impl PartialOrd for Number {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Display for Number {
    /// Plain decimal notation, as DynamoDB returns numbers (`1.5`, `-300`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sign = if self.mantissa < 0 { "-" } else { "" };
        let digits = self.mantissa.unsigned_abs().to_string();
        if self.exponent >= 0 {
            let zeros = "0".repeat(self.exponent as usize);
            return write!(f, "{sign}{digits}{zeros}");
        }
        let point = self.exponent.unsigned_abs() as usize;
        if digits.len() > point {
            let (int, frac) = digits.split_at(digits.len() - point);
            write!(f, "{sign}{int}.{frac}")
        } else {
            let zeros = "0".repeat(point - digits.len());
            write!(f, "{sign}0.{zeros}{digits}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Number {
        Number::parse(s).unwrap()
    }

    #[test]
    fn parses_and_prints_canonical_forms() {
        for (text, canonical) in [
            ("25", "25"),
            ("-0", "0"),
            ("007", "7"),
            ("1.50", "1.5"),
            ("+3", "3"),
            ("1e3", "1000"),
            ("-12.5E-2", "-0.125"),
            (".5", "0.5"),
            ("0.000", "0"),
        ] {
            assert_eq!(n(text).to_string(), canonical, "{text}");
        }
        for bad in ["", "-", "1.2.3", "abc", "1e", "0x10", "1 2"] {
            assert!(Number::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert!(Number::parse(&"9".repeat(39)).is_err());
        assert!(Number::parse("1e126").is_err());
        assert!(Number::parse("1e-131").is_err());
    }

    #[test]
    fn adds_exactly() {
        assert_eq!(n("0.1").add(n("0.2")).unwrap(), n("0.3"));
        assert_eq!(n("100").add(n("-25")).unwrap().to_string(), "75");
        assert_eq!(n("5").add(n("-5")).unwrap().to_string(), "0");
        assert_eq!(
            n("1e20").add(n("1")).unwrap().to_string(),
            "100000000000000000001"
        );
        assert!(n("1e100").add(n("1e-100")).is_err(), "beyond 38 digits");
    }

    proptest::proptest! {
        /// Any text: a number or an error, never a panic; and what parses
        /// prints back to itself and adds to itself without panicking.
        #[test]
        fn any_text_parses_or_is_refused(text in "[-+0-9.eE]{0,50}|[0-9]{1,3}[eE][-+]?[0-9]{1,12}") {
            if let Ok(a) = Number::parse(&text) {
                proptest::prop_assert_eq!(Number::parse(&a.to_string()), Ok(a));
                let _ = a.add(a);
                let _ = a.add(a.neg());
                let _ = a.cmp(&a.neg());
            }
        }
    }

    #[test]
    fn orders_numerically_not_textually() {
        assert!(n("10") > n("9"));
        assert!(n("-10") < n("-9"));
        assert!(n("0.5") < n("1"));
        assert!(n("-0.5") > n("-1"));
        assert!(n("0") > n("-0.001"));
        assert_eq!(n("1.0").cmp(&n("1")), Ordering::Equal);
        assert!(n("123") < n("124"));
        assert!(n("1.25") > n("1.2"));
    }
}
