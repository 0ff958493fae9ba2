//! The handler's writes on PostgreSQL: SQL statements that idemq runs in
//! its own transaction, after the job's marker row and before `COMMIT`.
//!
//! A statement's parameters carry their PostgreSQL type ([`SqlParam`], or
//! [`Sql::bind_as`] for types idemq does not map), so that each statement
//! is sent as one unnamed, typed statement (parse, bind and execute in one
//! message group): nothing to prepare first, no named prepared statement
//! left in the session (RDS Proxy pins a session that keeps one:
//! <https://docs.aws.amazon.com/AmazonRDS/latest/UserGuide/rds-proxy-pinning.html>),
//! and every statement of a job can be pipelined with the marker.

use std::borrow::Cow;
use std::fmt;
use std::time::SystemTime;

use tokio_postgres::types::{ToSql, Type};

use crate::followup::{FollowUp, FollowUpError};

/// A job's effect on PostgreSQL: statements run in order in one
/// transaction with the job's marker row, and the follow-up jobs to send
/// once it commits.
///
/// ```
/// use idemq::store::postgres::{Effect, Sql};
///
/// let effect = Effect::new()
///     .execute(
///         Sql::new(
///             "INSERT INTO order_status (order_id, status) VALUES ($1, $2) \
///              ON CONFLICT (order_id) DO UPDATE SET status = EXCLUDED.status",
///         )
///         .bind("o-1")
///         .bind("paid"),
///     )
///     .execute(
///         // Only the marker keeps this insert from running twice.
///         Sql::new("INSERT INTO ledger (order_id, cents) VALUES ($1, $2)")
///             .bind("o-1")
///             .bind(1250_i64),
///     );
/// assert_eq!(effect.statements().len(), 2);
/// ```
#[derive(Debug, Default)]
pub struct Effect {
    statements: Vec<Sql>,
    follow_ups: Vec<FollowUp>,
}

impl Effect {
    /// An effect with nothing to write: committing it records the marker
    /// only (the job is done, and a redelivery is a duplicate).
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `statement` after the ones added before it.
    pub fn execute(mut self, statement: Sql) -> Self {
        self.statements.push(statement);
        self
    }

    /// Sends `job` once the effect commits (and again, within the
    /// horizon, when a duplicate finds the marker): [`crate::followup`].
    pub fn then_send(mut self, job: FollowUp) -> Self {
        self.follow_ups.push(job);
        self
    }

    /// The statements, in the order they run.
    pub fn statements(&self) -> &[Sql] {
        &self.statements
    }

    /// The follow-up jobs.
    pub fn follow_ups(&self) -> &[FollowUp] {
        &self.follow_ups
    }

    /// Whether a statement's row count is checked before `COMMIT` (the
    /// commit then takes a second round trip).
    pub(crate) fn checks_rows(&self) -> bool {
        self.statements.iter().any(|s| s.expect.is_some())
    }

    /// Refuses, before any I/O, an effect that cannot be committed as it
    /// is: an empty statement, one that ends or opens a transaction or
    /// changes the session (idemq owns the transaction, and a session
    /// setting outlives the job), or invalid follow-ups.
    pub fn validate(&self) -> Result<(), EffectError> {
        for (index, s) in self.statements.iter().enumerate() {
            let words: Vec<String> = s
                .text
                .split_whitespace()
                .take(2)
                .map(|w| w.trim_end_matches(';').to_ascii_uppercase())
                .collect();
            let Some(first) = words.first() else {
                return Err(EffectError::Empty { index });
            };
            let second = words.get(1).map_or("", String::as_str);
            let refused = match first.as_str() {
                "BEGIN" | "START" | "COMMIT" | "END" | "ROLLBACK" | "ABORT" | "SAVEPOINT"
                | "RELEASE" | "PREPARE" | "DEALLOCATE" | "DISCARD" | "LISTEN" | "RESET" => true,
                // `SET LOCAL` ends with the transaction; a plain `SET`
                // stays with the pooled connection.
                "SET" => second != "LOCAL",
                _ => false,
            };
            if refused {
                return Err(EffectError::NotInTransaction {
                    index,
                    keyword: first.clone(),
                });
            }
        }
        crate::followup::check_all(&self.follow_ups, true).map_err(EffectError::FollowUp)
    }
}

/// One SQL statement of an [`Effect`], with its parameters (`$1`, `$2`, …
/// in the order bound) and what its row count must be.
pub struct Sql {
    pub(crate) text: Cow<'static, str>,
    pub(crate) params: Vec<(Box<dyn ToSql + Send + Sync>, Type)>,
    pub(crate) expect: Option<Expect>,
}

/// A statement's expected row count, and what a different count means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expect {
    pub(crate) rows: u64,
    /// A different count is a lost race (`Contended`), not the handler's
    /// business outcome (`Rejected`).
    pub(crate) optimistic: bool,
}

impl Sql {
    /// A statement: one SQL command, without a trailing `;` list (the
    /// extended protocol takes one command per statement).
    pub fn new(text: impl Into<Cow<'static, str>>) -> Self {
        Self {
            text: text.into(),
            params: Vec::new(),
            expect: None,
        }
    }

    /// Binds the next parameter, typed as [`SqlParam::sql_type`].
    pub fn bind<T: SqlParam>(self, value: T) -> Self {
        self.bind_as(value, T::sql_type())
    }

    /// Binds the next parameter as PostgreSQL type `ty`: for values idemq
    /// does not map itself (a `rust_decimal::Decimal` as
    /// [`Type::NUMERIC`], a `uuid::Uuid` as [`Type::UUID`], with the
    /// matching tokio-postgres feature).
    pub fn bind_as<T: ToSql + Send + Sync + 'static>(mut self, value: T, ty: Type) -> Self {
        self.params.push((Box::new(value), ty));
        self
    }

    /// The statement must change (or return) exactly `rows` rows: any
    /// other count rolls the job's transaction back as
    /// [`CommitOutcome::Rejected`](crate::store::CommitOutcome::Rejected), the
    /// handler's business outcome (`UPDATE accounts SET balance = balance
    /// - $1 WHERE id = $2 AND balance >= $1`, expecting 1 row: no funds).
    pub fn expect_rows(mut self, rows: u64) -> Self {
        self.expect = Some(Expect {
            rows,
            optimistic: false,
        });
        self
    }

    /// Like [`Sql::expect_rows`], but a different count means the state
    /// the handler read has moved (`UPDATE … WHERE version = $n`): a lost
    /// race, [`CommitOutcome::Contended`](crate::store::CommitOutcome::Contended),
    /// and the job runs again within the invocation.
    pub fn optimistic(mut self, rows: u64) -> Self {
        self.expect = Some(Expect {
            rows,
            optimistic: true,
        });
        self
    }

    /// The SQL text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The parameters' types, in order.
    pub fn param_types(&self) -> impl Iterator<Item = &Type> {
        self.params.iter().map(|(_, t)| t)
    }

    pub(crate) fn params_ref(&self) -> Vec<(&(dyn ToSql + Sync), Type)> {
        self.params
            .iter()
            .map(|(v, t)| (v.as_ref() as &(dyn ToSql + Sync), t.clone()))
            .collect()
    }
}

/// Shows the text and the parameters' types, never their values (they are
/// the job's data, and effects end up in logs).
impl fmt::Debug for Sql {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sql")
            .field("text", &self.text)
            .field("param_types", &self.param_types().collect::<Vec<_>>())
            .field("expect", &self.expect)
            .finish()
    }
}

/// A value that [`Sql::bind`] sends with its PostgreSQL type.
pub trait SqlParam: ToSql + Send + Sync + 'static {
    /// The type the server is told the parameter has.
    fn sql_type() -> Type;
}

macro_rules! sql_params {
    ($($t:ty => $ty:ident),* $(,)?) => {
        $(impl SqlParam for $t {
            fn sql_type() -> Type {
                Type::$ty
            }
        })*
    };
}

sql_params! {
    bool => BOOL,
    i16 => INT2,
    i32 => INT4,
    i64 => INT8,
    f32 => FLOAT4,
    f64 => FLOAT8,
    String => TEXT,
    &'static str => TEXT,
    Vec<u8> => BYTEA,
    SystemTime => TIMESTAMPTZ,
}

/// `None` is SQL `NULL` of `T`'s type.
impl<T: SqlParam> SqlParam for Option<T> {
    fn sql_type() -> Type {
        T::sql_type()
    }
}

/// Why an [`Effect`] cannot be committed (found before any I/O).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EffectError {
    /// A statement has no SQL.
    #[error("statement {index} is empty")]
    Empty {
        /// The statement's index.
        index: usize,
    },
    /// A statement would end or open a transaction, or change the
    /// session: idemq owns the transaction the effect runs in.
    #[error(
        "statement {index} starts with {keyword}: an effect's SQL runs inside idemq's transaction and must not control it or change the session"
    )]
    NotInTransaction {
        /// The statement's index.
        index: usize,
        /// Its first keyword.
        keyword: String,
    },
    /// The follow-ups are invalid.
    #[error(transparent)]
    FollowUp(FollowUpError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transaction_control_and_session_settings_are_refused() {
        for text in [
            "COMMIT",
            "commit;",
            "  Rollback",
            "BEGIN",
            "SAVEPOINT a",
            "SET search_path TO x",
            "set statement_timeout = 5",
            "RESET ALL",
            "PREPARE s AS SELECT 1",
        ] {
            let e = Effect::new()
                .execute(Sql::new(text))
                .validate()
                .unwrap_err();
            assert!(
                matches!(e, EffectError::NotInTransaction { index: 0, .. }),
                "{text}: {e}"
            );
        }
        assert_eq!(
            Effect::new().execute(Sql::new("  ")).validate(),
            Err(EffectError::Empty { index: 0 })
        );
        for text in [
            "SET LOCAL lock_timeout = '1s'",
            "INSERT INTO t VALUES ($1)",
            "UPDATE committed SET x = 1",
            "WITH x AS (SELECT 1) SELECT * FROM x",
        ] {
            assert_eq!(Effect::new().execute(Sql::new(text)).validate(), Ok(()));
        }
    }

    #[test]
    fn parameters_carry_their_type_and_debug_hides_their_values() {
        let s = Sql::new("INSERT INTO t VALUES ($1, $2, $3, $4)")
            .bind("secret-card-number")
            .bind(7_i64)
            .bind(Option::<i32>::None)
            .bind_as(String::from("1.50"), Type::TEXT);
        let types: Vec<&Type> = s.param_types().collect();
        assert_eq!(types, [&Type::TEXT, &Type::INT8, &Type::INT4, &Type::TEXT]);
        let shown = format!("{:?}", Effect::new().execute(s));
        assert!(!shown.contains("secret-card-number"), "{shown}");
        assert!(shown.contains("INSERT INTO t"), "{shown}");
    }

    #[test]
    fn row_checks_are_what_make_the_commit_wait() {
        let plain = Effect::new().execute(Sql::new("INSERT INTO t VALUES (1)"));
        assert!(!plain.checks_rows());
        let checked = plain.execute(Sql::new("UPDATE t SET x = 1").expect_rows(1));
        assert!(checked.checks_rows());
    }
}
