//! PostgreSQL as the system of record (feature `postgres`): the job's
//! marker row and the handler's SQL in one transaction.
//!
//! - [`commit`](self) (`commit.rs`): the dedup transaction, pipelined,
//!   and how each SQLSTATE maps onto an outcome;
//! - [`Effect`], [`Sql`]: the handler's statements, typed parameters,
//!   row-count checks;
//! - `outbox.rs`: follow-up jobs stored in the marker row;
//! - `records.rs`: failure records ([`crate::store::FailureRecords`]);
//! - [`Schema`]: the tables, created and versioned by `idemq init`
//!   (`provision.rs`);
//! - `pool.rs`, `tls.rs`, `iam.rs`: connections of an execution
//!   environment, TLS with rustls, IAM database authentication.
//!
//! A handler for this store returns an [`Effect`] (`type Effect =
//! idemq::store::postgres::Effect`), and [`crate::run`] hosts it on Lambda or as
//! a local worker, as it does a DynamoDB handler:
//!
//! ```no_run
//! use idemq::{Handler, JobError, JobMeta};
//! use idemq::store::postgres::{Effect, Sql};
//!
//! #[derive(serde::Deserialize)]
//! struct Paid { order_id: String, cents: i64 }
//!
//! struct Orders;
//!
//! impl Handler for Orders {
//!     type Job = Paid;
//!     type Effect = Effect;
//!
//!     async fn handle(&self, job: Paid, _meta: JobMeta) -> Result<Effect, JobError> {
//!         Ok(Effect::new()
//!             .execute(
//!                 Sql::new(
//!                     "INSERT INTO order_status (order_id, status) VALUES ($1, 'paid') \
//!                      ON CONFLICT (order_id) DO UPDATE SET status = 'paid'",
//!                 )
//!                 .bind(job.order_id.clone()),
//!             )
//!             .execute(
//!                 Sql::new("INSERT INTO ledger (order_id, cents) VALUES ($1, $2)")
//!                     .bind(job.order_id)
//!                     .bind(job.cents),
//!             ))
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), idemq::HostError> {
//!     idemq::run(Orders).await
//! }
//! ```
//!
//! Settings, besides the `IDEMQ_*` ones every consumer reads:
//!
//! | variable | meaning |
//! | --- | --- |
//! | `IDEMQ_POSTGRES_URL` (else `DATABASE_URL`) | the connection string, as libpq takes it (`postgres://user@host:5432/db?sslmode=require`) |
//! | `IDEMQ_POSTGRES_SCHEMA` | the schema of idemq's tables (default `idemq`) |
//! | `IDEMQ_POSTGRES_IAM_AUTH` | `true`: log in with an IAM token made for each connection, in the SDK's region |
//! | `IDEMQ_POSTGRES_CA_FILE` | a PEM bundle of CAs to trust besides the system's (RDS's global bundle) |
//! | `IDEMQ_POSTGRES_POOL` | connections per execution environment (default: `IDEMQ_CONCURRENCY`) |
//! | `IDEMQ_POSTGRES_PREPARE` | `true`: prepare each statement once per connection ([`PostgresConfig::with_prepared_statements`]) |

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::commit::{CommitError, JobRef, Marker};
use crate::config::{ConfigError, parse_bool};
use crate::failure::{DlqError, FailureRecord, LetterKey};
use crate::followup::FollowUp;
use crate::job::JobId;
use crate::store::{FailureRecords, LookedUp, Settled, Store};

mod commit;
mod effect;
mod iam;
mod outbox;
mod pipeline;
mod pool;
mod provision;
mod records;
mod tls;

pub use effect::{Effect, EffectError, Sql, SqlParam};
pub use provision::Schema;
// tokio-postgres's own type, not a copy: its page is tokio-postgres's.
#[doc(no_inline)]
pub use tokio_postgres::types::Type;

/// PostgreSQL as a [`Store`]: markers, effects and follow-ups committed in
/// one transaction, failure records beside them. Cheap to clone: clones
/// share the connections.
#[derive(Clone)]
pub struct Postgres {
    inner: Arc<Inner>,
}

impl fmt::Debug for Postgres {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Postgres")
            .field("schema", &self.inner.sql.schema)
            .field("namespace", &self.inner.namespace)
            .finish_non_exhaustive()
    }
}

/// What the store's calls share.
pub(crate) struct Inner {
    pool: pool::Pool,
    sql: Statements,
    namespace: Option<String>,
    marker_ttl: Duration,
    look_up: bool,
    /// Whether statements are prepared once per connection (named) instead
    /// of sent unnamed with every job.
    prepare: bool,
    /// How often this environment deletes expired rows (`None`: never).
    sweep_every: Option<Duration>,
    /// When this environment last deleted expired rows (seconds since the
    /// epoch; 0: not yet).
    last_sweep: std::sync::atomic::AtomicU64,
}

impl Inner {
    fn namespace_for<'a>(&'a self, queue: &'a str) -> &'a str {
        self.namespace
            .as_deref()
            .unwrap_or_else(|| crate::config::queue_name(queue))
    }
}

/// idemq's own SQL, for one schema.
pub(crate) struct Statements {
    schema: String,
    insert_marker: String,
    select_markers: String,
}

impl Statements {
    fn new(schema: &str) -> Self {
        Self {
            schema: schema.to_owned(),
            insert_marker: format!(
                "INSERT INTO \"{schema}\".markers \
                 (namespace, job_id, payload_hash, queue, committed_at, expires_at, follow_ups) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb)"
            ),
            // Every marker of a batch in one statement; the primary key
            // (namespace, job_id) serves both arrays.
            select_markers: format!(
                "SELECT namespace, job_id, payload_hash, queue, committed_at, expires_at, \
                 follow_ups::text AS follow_ups \
                 FROM \"{schema}\".markers WHERE namespace = ANY($1) AND job_id = ANY($2)"
            ),
        }
    }
}

/// How the store connects and keys its rows.
#[derive(Clone)]
pub struct PostgresConfig {
    url: String,
    schema: String,
    namespace: Option<String>,
    marker_ttl: Duration,
    look_up: bool,
    pool_size: usize,
    iam: Option<pool::IamAuth>,
    ca_file: Option<String>,
    sweep_every: Option<Duration>,
    prepare: bool,
}

impl fmt::Debug for PostgresConfig {
    /// Leaves the connection string out: it may hold a password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("schema", &self.schema)
            .field("namespace", &self.namespace)
            .field("marker_ttl", &self.marker_ttl)
            .field("look_up", &self.look_up)
            .field("pool_size", &self.pool_size)
            .field("iam", &self.iam.as_ref().map(|i| &i.region))
            .field("ca_file", &self.ca_file)
            .field("prepare", &self.prepare)
            .finish_non_exhaustive()
    }
}

impl PostgresConfig {
    /// Connects with `url` (libpq's URL or key-value form); tables in
    /// schema `idemq`, markers kept the default TTL, read before the
    /// handler, one connection.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            schema: "idemq".into(),
            namespace: None,
            marker_ttl: crate::config::DEFAULT_MARKER_TTL,
            look_up: crate::config::DEFAULT_READ_MARKER_FIRST,
            pool_size: 1,
            iam: None,
            ca_file: None,
            sweep_every: Some(Duration::from_secs(3600)),
            prepare: false,
        }
    }

    /// The settings in the environment (module doc), with `pool_size`
    /// connections unless `IDEMQ_POSTGRES_POOL` says otherwise, and the
    /// region and credentials of `sdk_config` for IAM authentication.
    pub fn from_env(
        sdk_config: &aws_config::SdkConfig,
        pool_size: usize,
    ) -> Result<Self, ConfigError> {
        Self::from_lookup(|v| std::env::var(v).ok(), sdk_config, pool_size)
    }

    pub(crate) fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
        sdk_config: &aws_config::SdkConfig,
        pool_size: usize,
    ) -> Result<Self, ConfigError> {
        let url = get("IDEMQ_POSTGRES_URL")
            .or_else(|| get("DATABASE_URL"))
            .filter(|u| !u.is_empty())
            .ok_or(ConfigError::Missing("IDEMQ_POSTGRES_URL"))?;
        let behaviour = crate::config::IdempotencyConfig::from_lookup(&get)?;
        let mut config = Self::new(url)
            .with_marker_ttl(behaviour.marker_ttl)
            .with_look_up(behaviour.read_marker_first)
            .with_pool_size(pool_size);
        if let Some(schema) = get("IDEMQ_POSTGRES_SCHEMA").filter(|s| !s.is_empty()) {
            config = config.with_schema(schema)?;
        }
        if let Some(ns) = get("IDEMQ_NAMESPACE").filter(|s| !s.is_empty()) {
            config = config.with_namespace(ns)?;
        }
        if let Some(n) = get("IDEMQ_POSTGRES_POOL") {
            let n = n
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=1000).contains(n))
                .ok_or_else(|| ConfigError::Invalid {
                    var: "IDEMQ_POSTGRES_POOL",
                    value: n.clone(),
                    why: "must be a whole number from 1 to 1000".into(),
                })?;
            config = config.with_pool_size(n);
        }
        if let Some(v) = get("IDEMQ_POSTGRES_IAM_AUTH")
            && parse_bool("IDEMQ_POSTGRES_IAM_AUTH", v)?
        {
            let region = sdk_config
                .region()
                .map(|r| r.to_string())
                .ok_or(ConfigError::Missing("AWS_REGION"))?;
            let credentials = sdk_config
                .credentials_provider()
                .ok_or(ConfigError::Missing("AWS credentials"))?;
            config.iam = Some(pool::IamAuth {
                region,
                credentials,
            });
        }
        config.ca_file = get("IDEMQ_POSTGRES_CA_FILE").filter(|s| !s.is_empty());
        if let Some(v) = get("IDEMQ_POSTGRES_PREPARE") {
            config.prepare = parse_bool("IDEMQ_POSTGRES_PREPARE", v)?;
        }
        Ok(config)
    }

    /// idemq's tables in `schema` (letters, digits and `_`, starting with
    /// a letter or `_`, at most 63 bytes: an identifier that needs no
    /// quoting rules of its own).
    pub fn with_schema(mut self, schema: impl Into<String>) -> Result<Self, ConfigError> {
        let schema = schema.into();
        let valid = schema.len() <= 63
            && schema
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
            && schema
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            return Err(ConfigError::Invalid {
                var: "IDEMQ_POSTGRES_SCHEMA",
                value: schema,
                why: "must be lower-case letters, digits and _, starting with a letter or _, at most 63 bytes".into(),
            });
        }
        self.schema = schema;
        Ok(self)
    }

    /// The consumer's namespace (`IDEMQ_NAMESPACE`): its markers and
    /// failure records are keyed by it instead of the source queue's name
    /// ([`TableLayout::namespace_for`](crate::config::TableLayout::namespace_for)).
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Result<Self, ConfigError> {
        let namespace = namespace.into();
        crate::config::check_namespace(&namespace)?;
        self.namespace = Some(namespace);
        Ok(self)
    }

    /// How long markers (and failure records) are kept.
    pub fn with_marker_ttl(mut self, ttl: Duration) -> Self {
        self.marker_ttl = ttl;
        self
    }

    /// Whether a job's marker is read before its handler runs (the
    /// default), so that a duplicate's handler does not run again.
    pub fn with_look_up(mut self, look_up: bool) -> Self {
        self.look_up = look_up;
        self
    }

    /// At most `size` connections at once (one per job in flight).
    pub fn with_pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// How often an execution environment deletes markers and failure
    /// records whose TTL has passed, in the background after a commit
    /// (the first commit, then every hour by default); `None` leaves it
    /// to [`Postgres::delete_expired`] run on a schedule of your own.
    pub fn with_sweep_every(mut self, every: Option<Duration>) -> Self {
        self.sweep_every = every;
        self
    }

    /// Whether each statement (idemq's and the effects') is prepared once
    /// per connection, named, and then only bound and executed
    /// (`IDEMQ_POSTGRES_PREPARE`; default `false`: each is sent unnamed,
    /// parsed and planned by the server with every job). Preparing saves
    /// the server that work on every job (BENCHMARKS.md, "PostgreSQL") and
    /// costs one round trip the first time a connection meets a
    /// statement. Turn it on for a server reached directly; leave it off
    /// behind a pooler that hands a session's statements to other clients
    /// (PgBouncer in transaction mode before 1.21) or where named
    /// statements may pin sessions (RDS Proxy:
    /// <https://docs.aws.amazon.com/AmazonRDS/latest/UserGuide/rds-proxy-pinning.html>).
    pub fn with_prepared_statements(mut self, prepare: bool) -> Self {
        self.prepare = prepare;
        self
    }

    /// Trusts the CAs of the PEM file at `path` besides the system's.
    pub fn with_ca_file(mut self, path: impl Into<String>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// The schema of idemq's tables.
    pub fn schema(&self) -> &str {
        &self.schema
    }
}

impl Postgres {
    /// The store `config` describes. Connects lazily: the first job opens
    /// the first connection. Fails on a connection string that does not
    /// parse or a CA file that cannot be read.
    pub fn new(config: PostgresConfig) -> Result<Self, ConfigError> {
        let invalid = |why: String| ConfigError::Invalid {
            var: "IDEMQ_POSTGRES_URL",
            value: "(not shown: it may hold a password)".into(),
            why,
        };
        let pg: tokio_postgres::Config = config.url.parse().map_err(|e| invalid(format!("{e}")))?;
        let tls = match pg.get_ssl_mode() {
            tokio_postgres::config::SslMode::Disable => None,
            _ => Some(tls::Tls::new(config.ca_file.as_deref()).map_err(|why| {
                ConfigError::Invalid {
                    var: "IDEMQ_POSTGRES_CA_FILE",
                    value: config.ca_file.clone().unwrap_or_default(),
                    why,
                }
            })?),
        };
        let connector = pool::Connector {
            config: pg,
            tls,
            iam: config.iam.clone(),
        };
        Ok(Self {
            inner: Arc::new(Inner {
                pool: pool::Pool::new(connector, config.pool_size),
                sql: Statements::new(&config.schema),
                namespace: config.namespace.clone(),
                marker_ttl: config.marker_ttl,
                look_up: config.look_up,
                sweep_every: config.sweep_every,
                prepare: config.prepare,
                last_sweep: Default::default(),
            }),
        })
    }

    /// The failure records kept beside the markers.
    pub fn failure_records(&self) -> Arc<dyn FailureRecords> {
        Arc::new(records::Records::new(Arc::clone(&self.inner)))
    }

    /// The schema's provisioner (`idemq init`).
    pub fn schema(&self) -> Schema {
        Schema::new(Arc::clone(&self.inner))
    }

    /// Deletes up to `limit` markers and failure records whose TTL has
    /// passed, and says how many. PostgreSQL has no TTL of its own: the
    /// store calls this itself at most once an hour per environment, and
    /// operators may run it from a schedule.
    pub async fn delete_expired(&self, limit: i64) -> Result<u64, CommitError> {
        self.inner.delete_expired(limit).await
    }
}

impl Store for Postgres {
    type Effect = Effect;

    fn follow_ups<'e>(&self, effect: &'e Effect) -> &'e [FollowUp] {
        effect.follow_ups()
    }

    fn namespace_for<'a>(&'a self, queue: &'a str) -> &'a str {
        self.inner.namespace_for(queue)
    }

    fn looks_up(&self) -> bool {
        self.inner.look_up
    }

    fn look_up<'a>(
        &'a self,
        jobs: &'a [JobRef<'a>],
    ) -> BoxFuture<'a, Vec<Result<LookedUp, CommitError>>> {
        Box::pin(self.inner.look_up(jobs))
    }

    fn commit<'a>(
        &'a self,
        job: JobRef<'a>,
        effect: &'a Effect,
    ) -> BoxFuture<'a, Result<Settled, CommitError>> {
        Box::pin(async move {
            let settled = self.inner.settle(job, effect).await;
            if self.inner.sweep_due() {
                // In the background, on a connection of its own: no job waits.
                let inner = Arc::clone(&self.inner);
                tokio::spawn(async move { inner.sweep().await });
            }
            settled
        })
    }

    fn commit_batch<'a>(
        &'a self,
        jobs: &'a [(JobRef<'a>, &'a Effect)],
    ) -> BoxFuture<'a, Vec<Result<Settled, CommitError>>> {
        Box::pin(async move {
            let settled = self.inner.settle_batch(jobs).await;
            if self.inner.sweep_due() {
                let inner = Arc::clone(&self.inner);
                tokio::spawn(async move { inner.sweep().await });
            }
            settled
        })
    }

    fn groups_commits(&self) -> bool {
        // Prepared statements are prepared per connection before their
        // transaction opens: those jobs are committed one by one anyway.
        !self.inner.prepare
    }

    fn read_marker<'a>(
        &'a self,
        queue: &'a str,
        job_id: &'a JobId,
    ) -> BoxFuture<'a, Result<Option<Marker>, CommitError>> {
        Box::pin(self.inner.read_marker(queue, job_id))
    }

    fn record_failure<'a>(&'a self, rec: &'a FailureRecord) -> BoxFuture<'a, Result<(), DlqError>> {
        Box::pin(async move {
            records::Records::new(Arc::clone(&self.inner))
                .put(rec)
                .await
        })
    }

    fn marker_ttl(&self) -> Duration {
        self.inner.marker_ttl
    }
}

impl FailureRecords for records::Records {
    fn record_failure<'a>(&'a self, rec: &'a FailureRecord) -> BoxFuture<'a, Result<(), DlqError>> {
        Box::pin(self.put(rec))
    }

    fn read_failure<'a>(
        &'a self,
        sources: &'a [String],
        job_id: Option<&'a str>,
        message_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<FailureRecord>, DlqError>> {
        Box::pin(self.one(sources, job_id, message_id))
    }

    fn read_failures<'a>(
        &'a self,
        sources: &'a [String],
        wanted: &'a [LetterKey],
    ) -> BoxFuture<'a, Result<std::collections::HashMap<LetterKey, FailureRecord>, DlqError>> {
        Box::pin(self.many(sources, wanted))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(vars: &[(&str, &str)]) -> Result<PostgresConfig, ConfigError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let get = |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        PostgresConfig::from_lookup(get, &aws_config::SdkConfig::builder().build(), 4)
    }

    #[test]
    fn switches_read_true_or_false_and_name_the_variable_otherwise() {
        let url = ("IDEMQ_POSTGRES_URL", "postgres://u@h/db");
        assert!(
            lookup(&[url, ("IDEMQ_POSTGRES_PREPARE", "true")])
                .unwrap()
                .prepare
        );
        assert!(
            !lookup(&[url, ("IDEMQ_POSTGRES_PREPARE", "0")])
                .unwrap()
                .prepare
        );
        let e = lookup(&[url, ("IDEMQ_POSTGRES_PREPARE", "maybe")]).unwrap_err();
        assert!(e.to_string().contains("IDEMQ_POSTGRES_PREPARE"), "{e}");
        assert!(
            lookup(&[url, ("IDEMQ_POSTGRES_IAM_AUTH", "false")])
                .unwrap()
                .iam
                .is_none()
        );
        // IAM authentication signs with the SDK's region and credentials.
        let e = lookup(&[url, ("IDEMQ_POSTGRES_IAM_AUTH", "1")]).unwrap_err();
        assert!(e.to_string().contains("AWS_REGION"), "{e}");
        let e = lookup(&[url, ("IDEMQ_POSTGRES_POOL", "0")]).unwrap_err();
        assert!(e.to_string().contains("IDEMQ_POSTGRES_POOL"), "{e}");
        assert_eq!(lookup(&[url]).unwrap().pool_size, 4);
        assert!(lookup(&[]).is_err(), "the URL is required");
    }
}
