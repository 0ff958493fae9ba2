//! A consumer's settings as its environment holds them, for the operator
//! tools that must read its records and resolve its job ids exactly as it
//! does.
//!
//! The environment is the CLI's own (`IDEMQ_*` exported in the shell) or a
//! deployed function's, read from its configuration (`idemq dlq
//! --function`). Either way the same parsers as the consumer's run over
//! it ([`IdempotencyConfig`], [`TableLayout`], the PostgreSQL store's
//! settings), so a tool never reads keys the consumer did not write.

use std::collections::BTreeMap;

use crate::config::{ConfigError, IdempotencyConfig, TableLayout};

/// The variables a consumer's operator tools read, in the order they are
/// shown. `IDEMQ_POSTGRES_POOL` is not among them: a tool opens one
/// connection, whatever the function's pool.
pub const CONSUMER_VARS: [&str; 15] = [
    "IDEMQ_TABLE",
    "IDEMQ_NAMESPACE",
    "IDEMQ_KEY_PREFIX",
    "IDEMQ_ATTR_PK",
    "IDEMQ_ATTR_EXPIRES_AT",
    "IDEMQ_JOB_ID_POINTER",
    "IDEMQ_ENVELOPE",
    "IDEMQ_MARKER_TTL",
    "IDEMQ_LEGACY_MARKERS",
    "IDEMQ_POSTGRES_URL",
    "DATABASE_URL",
    "IDEMQ_POSTGRES_SCHEMA",
    "IDEMQ_POSTGRES_IAM_AUTH",
    "IDEMQ_POSTGRES_CA_FILE",
    "IDEMQ_POSTGRES_PREPARE",
];

/// Variables whose values may hold a password: shown with it blanked
/// ([`redact_conninfo`]).
const SECRET_VARS: [&str; 2] = ["IDEMQ_POSTGRES_URL", "DATABASE_URL"];

/// A consumer's environment: the [`CONSUMER_VARS`] that are set.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ConsumerEnv {
    vars: BTreeMap<String, String>,
}

impl std::fmt::Debug for ConsumerEnv {
    /// The values as [`ConsumerEnv::shown`] gives them: no password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.shown()).finish()
    }
}

impl ConsumerEnv {
    /// This process's environment.
    pub fn from_process() -> Self {
        Self::from_vars(
            CONSUMER_VARS
                .iter()
                .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v))),
        )
    }

    /// The variables `vars` (a function's whole environment, say): those
    /// of [`CONSUMER_VARS`] are kept, the rest dropped unread.
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Self {
        Self {
            vars: vars
                .into_iter()
                .filter(|(k, _)| CONSUMER_VARS.contains(&k.as_str()))
                .collect(),
        }
    }

    /// The value of `var`, if set.
    pub fn get(&self, var: &str) -> Option<&str> {
        self.vars.get(var).map(String::as_str)
    }

    /// The variables set, in [`CONSUMER_VARS`] order, each value fit to
    /// print: a connection string's password is blanked.
    pub fn shown(&self) -> Vec<(&'static str, String)> {
        CONSUMER_VARS
            .iter()
            .filter_map(|k| {
                let v = self.get(k)?;
                let shown = if SECRET_VARS.contains(k) {
                    redact_conninfo(v)
                } else {
                    v.to_owned()
                };
                Some((*k, shown))
            })
            .collect()
    }

    /// The consumer's behaviour: its job-id resolver (`IDEMQ_JOB_ID_POINTER`,
    /// `IDEMQ_ENVELOPE`) and marker TTL (`IDEMQ_MARKER_TTL`).
    pub fn behaviour(&self) -> Result<IdempotencyConfig, ConfigError> {
        IdempotencyConfig::from_lookup(|k| self.get(k).map(str::to_owned))
    }

    /// The consumer's table layout, with the table `table` when given (a
    /// flag) or else `IDEMQ_TABLE`; `None` when neither names one.
    pub fn layout(&self, table: Option<&str>) -> Result<Option<TableLayout>, ConfigError> {
        let table = table.or(self.get("IDEMQ_TABLE")).filter(|t| !t.is_empty());
        let Some(table) = table else {
            return Ok(None);
        };
        TableLayout::from_lookup(|k| match k {
            "IDEMQ_TABLE" => Some(table.to_owned()),
            _ => self.get(k).map(str::to_owned),
        })
        .map(Some)
    }

    /// `IDEMQ_NAMESPACE`, when set.
    pub fn namespace(&self) -> Option<&str> {
        self.get("IDEMQ_NAMESPACE").filter(|n| !n.is_empty())
    }

    /// Whether the consumer keeps its records in PostgreSQL: it has a
    /// connection string (`IDEMQ_POSTGRES_URL` or `DATABASE_URL`).
    pub fn has_postgres_url(&self) -> bool {
        ["IDEMQ_POSTGRES_URL", "DATABASE_URL"]
            .iter()
            .any(|k| self.get(k).is_some_and(|v| !v.is_empty()))
    }

    /// The consumer's PostgreSQL store settings, with one connection and
    /// the region and credentials of `sdk_config` (for IAM
    /// authentication).
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub fn postgres(
        &self,
        sdk_config: &aws_config::SdkConfig,
    ) -> Result<crate::store::postgres::PostgresConfig, ConfigError> {
        crate::store::postgres::PostgresConfig::from_lookup(
            |k| self.get(k).map(str::to_owned),
            sdk_config,
            1,
        )
    }
}

/// A PostgreSQL connection string (a URL or libpq's `key=value` form)
/// with its password replaced by `***`, fit to print.
///
/// ```
/// use idemq::dlq::settings::redact_conninfo;
/// assert_eq!(
///     redact_conninfo("postgres://app:s3cret@db:5432/jobs"),
///     "postgres://app:***@db:5432/jobs"
/// );
/// assert_eq!(
///     redact_conninfo("host=db password=s3cret user=app"),
///     "host=db password=*** user=app"
/// );
/// ```
pub fn redact_conninfo(conninfo: &str) -> String {
    if let Some((scheme, rest)) = conninfo.split_once("://") {
        // The userinfo ends at the last '@' before the path: a password
        // may itself hold an '@'.
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let authority = match authority.rsplit_once('@') {
            Some((userinfo, host)) => match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:***@{host}"),
                None => format!("{userinfo}@{host}"),
            },
            None => authority.to_owned(),
        };
        let tail = redact_query_password(tail);
        return format!("{scheme}://{authority}{tail}");
    }
    redact_key_value(conninfo)
}

/// `?…&password=x&…` with the value blanked.
fn redact_query_password(tail: &str) -> String {
    let Some((path, query)) = tail.split_once('?') else {
        return tail.to_owned();
    };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{path}?{}", query.join("&"))
}

/// libpq's `key=value` form with the password's value blanked, quoted
/// (`password='a b'`) or not.
fn redact_key_value(conninfo: &str) -> String {
    let mut out = String::with_capacity(conninfo.len());
    let mut rest = conninfo;
    while let Some(at) = find_password_key(rest) {
        let (before, from) = rest.split_at(at);
        out.push_str(before);
        let eq = from.find('=').expect("found with its '='");
        out.push_str(&from[..=eq]);
        out.push_str("***");
        let value = from[eq + 1..].trim_start();
        rest = if let Some(quoted) = value.strip_prefix('\'') {
            // A quoted value ends at the first quote not escaped by '\'.
            let mut end = quoted.len();
            let mut escaped = false;
            for (i, c) in quoted.char_indices() {
                match c {
                    '\\' if !escaped => escaped = true,
                    '\'' if !escaped => {
                        end = i + 1;
                        break;
                    }
                    _ => escaped = false,
                }
            }
            &quoted[end.min(quoted.len())..]
        } else {
            let end = value.find(char::is_whitespace).unwrap_or(value.len());
            &value[end..]
        };
    }
    out.push_str(rest);
    out
}

/// Where `password` starts as a key (at the start or after whitespace,
/// followed by optional spaces and '=').
fn find_password_key(s: &str) -> Option<usize> {
    let lower = s.to_ascii_lowercase();
    let mut from = 0;
    while let Some(i) = lower[from..].find("password") {
        let at = from + i;
        let starts = at == 0 || lower[..at].ends_with(char::is_whitespace);
        let after = lower[at + "password".len()..].trim_start();
        if starts && after.starts_with('=') {
            return Some(at);
        }
        from = at + "password".len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> ConsumerEnv {
        ConsumerEnv::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    /// A function's whole environment goes in; only idemq's variables are
    /// kept (another variable may be a secret of the handler's), and the
    /// pool size is the tool's, not the function's.
    #[test]
    fn only_the_consumer_s_variables_are_kept() {
        let e = env(&[
            ("IDEMQ_TABLE", "jobs"),
            ("STRIPE_KEY", "sk_live_x"),
            ("IDEMQ_POSTGRES_POOL", "20"),
        ]);
        assert_eq!(e.get("IDEMQ_TABLE"), Some("jobs"));
        assert_eq!(e.get("STRIPE_KEY"), None);
        assert_eq!(e.get("IDEMQ_POSTGRES_POOL"), None);
        assert!(!format!("{e:?}").contains("sk_live"));
    }

    /// The flag's table wins; the rest of the layout (prefix, key name,
    /// namespace) and the job-id resolver come from the environment.
    #[test]
    fn layout_and_behaviour_follow_the_environment() {
        let e = env(&[
            ("IDEMQ_TABLE", "jobs"),
            ("IDEMQ_NAMESPACE", "billing"),
            ("IDEMQ_KEY_PREFIX", "custom#"),
            ("IDEMQ_JOB_ID_POINTER", "/ref"),
            ("IDEMQ_MARKER_TTL", "30d"),
        ]);
        let l = e.layout(None).unwrap().unwrap();
        assert_eq!(
            (l.table_name.as_str(), l.key_prefix.as_str()),
            ("jobs", "custom#")
        );
        assert_eq!(l.namespace.as_deref(), Some("billing"));
        let l = e.layout(Some("other")).unwrap().unwrap();
        assert_eq!(l.table_name, "other");
        assert_eq!(e.layout(None).unwrap().unwrap().table_name, "jobs");
        assert!(env(&[]).layout(None).unwrap().is_none());
        let b = e.behaviour().unwrap();
        assert_eq!(b.marker_ttl, std::time::Duration::from_secs(30 * 86_400));
        assert!(env(&[("IDEMQ_MARKER_TTL", "soon")]).behaviour().is_err());
        assert!(!e.has_postgres_url());
        assert!(env(&[("DATABASE_URL", "postgres://x")]).has_postgres_url());
    }

    #[test]
    fn passwords_are_never_shown() {
        for (given, shown) in [
            ("postgres://u:p@h/db", "postgres://u:***@h/db"),
            (
                "postgresql://u:p@ss@h:5432/db?sslmode=require",
                "postgresql://u:***@h:5432/db?sslmode=require",
            ),
            ("postgres://u@h/db", "postgres://u@h/db"),
            (
                "postgres://h/db?user=u&password=p&x=1",
                "postgres://h/db?user=u&password=***&x=1",
            ),
            ("host=h password=p user=u", "host=h password=*** user=u"),
            (
                "host=h password = 'a b\\' c' user=u",
                "host=h password =*** user=u",
            ),
            ("password=p", "password=***"),
            ("host=h passwordless=1", "host=h passwordless=1"),
        ] {
            assert_eq!(redact_conninfo(given), shown, "{given}");
        }
        let e = env(&[("IDEMQ_POSTGRES_URL", "postgres://u:hunter2@h/db")]);
        assert_eq!(
            e.shown(),
            vec![("IDEMQ_POSTGRES_URL", "postgres://u:***@h/db".to_owned())]
        );
        assert!(!format!("{e:?}").contains("hunter2"));
    }
}
