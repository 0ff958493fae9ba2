//! [`canonical_json`](super::canonical_json) over JSON text, keeping numbers
//! exact. A scanner of its own, since serde_json (without
//! `arbitrary_precision`) rounds a number beyond i64/u64 to an f64.
use serde_json::Value;

/// A JSON value as scanned, its scalars still as written.
enum Raw<'a> {
    Object(Vec<(String, Raw<'a>)>),
    Array(Vec<Raw<'a>>),
    Scalar(&'a str),
}

/// The top-level `detail` of the event `body` (valid JSON, already
/// parsed once by serde_json) in the form [`super::canonical_json`]
/// gives, except that a number an f64 cannot hold exactly (beyond
/// i64/u64, or with more significant digits than an f64 keeps) is
/// written as the event wrote it: two details that differ only there
/// hash differently, and the handler decodes the exact digits. Every
/// other number renders as before, so the payload hashes of existing
/// markers still match. `None` if the text does not scan.
pub(super) fn canonical_detail(body: &str) -> Option<String> {
    let mut scan = Scan { text: body, at: 0 };
    let Raw::Object(fields) = scan.value()? else {
        return None;
    };
    // serde_json keeps the last of repeated keys: so does this.
    let detail = fields.into_iter().rev().find(|(k, _)| k == "detail")?.1;
    let mut out = String::new();
    write(detail, &mut out)?;
    Some(out)
}

fn write(raw: Raw<'_>, out: &mut String) -> Option<()> {
    match raw {
        Raw::Object(mut fields) => {
            // Stable: of repeated keys, the last one stays (as in
            // serde_json's map).
            fields.sort_by(|a, b| a.0.cmp(&b.0));
            let mut kept: Vec<(String, Raw<'_>)> = Vec::with_capacity(fields.len());
            for (k, v) in fields {
                match kept.last_mut() {
                    Some(last) if last.0 == k => last.1 = v,
                    _ => kept.push((k, v)),
                }
            }
            out.push('{');
            for (i, (k, v)) in kept.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k).to_string());
                out.push(':');
                write(v, out)?;
            }
            out.push('}');
        }
        Raw::Array(items) => {
            out.push('[');
            for (i, item) in items.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, out)?;
            }
            out.push(']');
        }
        Raw::Scalar(token) => out.push_str(&scalar(token)?),
    }
    Some(())
}

fn scalar(token: &str) -> Option<String> {
    let value: Value = match serde_json::from_str(token) {
        Ok(value) => value,
        // Out of f64's range ("1e400"): only the text holds it.
        Err(_) if is_number(token) => return Some(token.to_owned()),
        Err(_) => return None,
    };
    Some(match &value {
        Value::Number(n) if n.is_f64() => {
            let rendered = n.to_string();
            if same_decimal(token, &rendered) {
                rendered
            } else {
                token.to_owned()
            }
        }
        _ => value.to_string(),
    })
}

fn is_number(token: &str) -> bool {
    token
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E'))
}

/// Whether two JSON numbers denote the same decimal value (so the
/// shortest f64 rendering lost nothing of what was written).
fn same_decimal(a: &str, b: &str) -> bool {
    decimal(a).is_some_and(|a| decimal(b).is_some_and(|b| a == b))
}

/// `(negative, significant digits, exponent)`: the value is the digits
/// times 10^exponent; zero is `(false, "", 0)`.
fn decimal(number: &str) -> Option<(bool, String, i64)> {
    let (negative, rest) = match number.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, number),
    };
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(i) => (&rest[..i], rest[i + 1..].parse::<i64>().ok()?),
        None => (rest, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{int}{frac}");
    let mut exponent = exponent.checked_sub(i64::try_from(frac.len()).ok()?)?;
    let digits = digits.trim_start_matches('0');
    let trimmed = digits.trim_end_matches('0');
    exponent = exponent.checked_add(i64::try_from(digits.len() - trimmed.len()).ok()?)?;
    if trimmed.is_empty() {
        return Some((false, String::new(), 0));
    }
    Some((negative, trimmed.to_owned(), exponent))
}

struct Scan<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Scan<'a> {
    fn skip_space(&mut self) {
        let rest = &self.text[self.at..];
        self.at += rest.len() - rest.trim_start_matches([' ', '\t', '\n', '\r']).len();
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        self.skip_space();
        let found = self.peek() == Some(byte);
        if found {
            self.at += 1;
        }
        found
    }

    fn value(&mut self) -> Option<Raw<'a>> {
        self.skip_space();
        match self.peek()? {
            b'{' => {
                self.at += 1;
                let mut fields = Vec::new();
                if self.eat(b'}') {
                    return Some(Raw::Object(fields));
                }
                loop {
                    self.skip_space();
                    let key = serde_json::from_str::<String>(self.string()?).ok()?;
                    if !self.eat(b':') {
                        return None;
                    }
                    fields.push((key, self.value()?));
                    if self.eat(b'}') {
                        return Some(Raw::Object(fields));
                    }
                    if !self.eat(b',') {
                        return None;
                    }
                }
            }
            b'[' => {
                self.at += 1;
                let mut items = Vec::new();
                if self.eat(b']') {
                    return Some(Raw::Array(items));
                }
                loop {
                    items.push(self.value()?);
                    if self.eat(b']') {
                        return Some(Raw::Array(items));
                    }
                    if !self.eat(b',') {
                        return None;
                    }
                }
            }
            b'"' => self.string().map(Raw::Scalar),
            _ => {
                // A number, `true`, `false` or `null`.
                let start = self.at;
                let rest = &self.text[start..];
                let len = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || "+-.".contains(c)))
                    .unwrap_or(rest.len());
                self.at += len;
                (len > 0).then(|| Raw::Scalar(&self.text[start..self.at]))
            }
        }
    }

    /// A string token, quotes and escapes included. `"` and `\` are
    /// ASCII, never part of a multi-byte UTF-8 character.
    fn string(&mut self) -> Option<&'a str> {
        let bytes = self.text.as_bytes();
        if bytes.get(self.at) != Some(&b'"') {
            return None;
        }
        let start = self.at;
        let mut i = start + 1;
        loop {
            match bytes.get(i)? {
                b'\\' => i += 2,
                b'"' => break,
                _ => i += 1,
            }
        }
        self.at = i + 1;
        Some(&self.text[start..self.at])
    }
}
