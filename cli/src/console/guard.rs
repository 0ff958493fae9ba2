//! Who may ask the console anything.
//!
//! As notebook servers do: the address the console prints carries a
//! secret token; the browser that opens it gets a session cookie
//! (HttpOnly, SameSite=Strict) and every other request without that cookie
//! is refused. Pages carry a CSRF token that every POST must send back,
//! and a POST whose `Origin` is not the console's own is refused: another
//! site open in the same browser (another port of localhost is the same
//! *site* to a browser, so the cookie alone does not stop it) can make the
//! browser post a form, but cannot read a page to learn the token.

use axum::http::HeaderMap;
use axum::http::header::{COOKIE, ORIGIN};

const COOKIE_NAME: &str = "idemq_console";

pub(crate) struct Guard {
    /// In the printed address; exchanged for the session cookie.
    token: String,
    session: String,
    csrf: String,
    /// `http://127.0.0.1:PORT`, what a same-origin POST names.
    origin: String,
}

/// 256 bits from the OS-seeded thread generator, as hex.
fn secret() -> String {
    format!(
        "{:032x}{:032x}",
        rand::random::<u128>(),
        rand::random::<u128>()
    )
}

/// Equal, in a time that does not depend on where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl Guard {
    pub fn new(origin: String) -> Self {
        Self {
            token: secret(),
            session: secret(),
            csrf: secret(),
            origin,
        }
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    pub fn token_matches(&self, token: &str) -> bool {
        same(token, &self.token)
    }

    /// The `Set-Cookie` value that opens a session.
    pub fn cookie(&self) -> String {
        format!(
            "{COOKIE_NAME}={}; HttpOnly; SameSite=Strict; Path=/",
            self.session
        )
    }

    /// Whether the request carries the session cookie.
    pub fn session_ok(&self, headers: &HeaderMap) -> bool {
        headers
            .get_all(COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .any(|(name, value)| name == COOKIE_NAME && same(value, &self.session))
    }

    /// Whether a POST may act: the session, the CSRF token it sent back,
    /// and its origin; else why not.
    pub fn post_ok(&self, headers: &HeaderMap, csrf: Option<&str>) -> Result<(), &'static str> {
        if let Some(origin) = headers.get(ORIGIN)
            && origin.to_str().ok() != Some(self.origin.as_str())
        {
            return Err("it comes from another origin");
        }
        if headers
            .get("sec-fetch-site")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|s| s == "cross-site" || s == "same-site")
        {
            return Err("the browser says it comes from another site");
        }
        if !self.session_ok(headers) {
            return Err("no session: open the address idemq console printed");
        }
        match csrf {
            Some(t) if same(t, &self.csrf) => Ok(()),
            _ => Err("its form carries no valid CSRF token"),
        }
    }
}

/// Who acts, for the audit: the account running the console (only its
/// browser session can act) and the browser it was asked from.
pub(crate) fn who(headers: &HeaderMap) -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown".into());
    let agent = headers
        .get(axum::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(|a| a.split_whitespace().last().unwrap_or(a).to_owned())
        .unwrap_or_else(|| "no user agent".into());
    format!("{user} ({agent})")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn a_post_needs_session_token_and_origin() {
        let g = Guard::new("http://127.0.0.1:7878".into());
        let cookie = format!("other=1; {COOKIE_NAME}={}", g.session);
        let ok = headers(&[("cookie", &cookie), ("origin", "http://127.0.0.1:7878")]);
        assert!(g.post_ok(&ok, Some(g.csrf())).is_ok());
        assert!(g.post_ok(&ok, None).is_err(), "no CSRF token");
        assert!(g.post_ok(&ok, Some("guess")).is_err());
        let foreign = headers(&[("cookie", &cookie), ("origin", "http://127.0.0.1:9999")]);
        assert!(g.post_ok(&foreign, Some(g.csrf())).is_err(), "another port");
        let site = headers(&[("cookie", &cookie), ("sec-fetch-site", "same-site")]);
        assert!(g.post_ok(&site, Some(g.csrf())).is_err());
        let no_session = headers(&[("origin", "http://127.0.0.1:7878")]);
        assert!(g.post_ok(&no_session, Some(g.csrf())).is_err());
        assert!(!g.session_ok(&headers(&[("cookie", "idemq_console=x")])));
        assert!(g.token_matches(&g.token.clone()));
        assert!(!g.token_matches(""));
    }
}
