//! idemq's tables on PostgreSQL, created and versioned by `idemq init`, and
//! the deletion of rows whose TTL has passed (PostgreSQL has no TTL).
//!
//! ```sql
//! CREATE TABLE <schema>.markers (
//!     namespace text, job_id text, payload_hash text NOT NULL,
//!     queue text NOT NULL, committed_at timestamptz NOT NULL,
//!     expires_at timestamptz NOT NULL, follow_ups jsonb,
//!     PRIMARY KEY (namespace, job_id));
//! CREATE INDEX … ON <schema>.markers USING brin (expires_at);
//! CREATE TABLE <schema>.failures (…, deploy text, idemq_version text, backtrace text,
//!     PRIMARY KEY (namespace, key));
//! CREATE TABLE <schema>.schema_version (version integer PRIMARY KEY, …);
//! ```
//!
//! No sequence, no serial column: nothing in idemq's tables ties a
//! session to a connection behind RDS Proxy. The markers' TTL index is a
//! BRIN index: markers are inserted in commit order, so `expires_at`
//! follows the table's physical order and a block-range summary finds
//! expired rows at a small fraction of a B-tree's size and upkeep
//! (<https://www.postgresql.org/docs/current/brin.html>).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::UNIX_EPOCH;

use futures_util::future::BoxFuture;
use tokio_postgres::types::Type;

use super::Inner;
use crate::commit::CommitError;
use crate::store::{Provision, ProvisionError, Provisioned};

/// The schema version this idemq writes and reads.
pub const VERSION: i32 = 3;

/// Rows deleted per table by one sweep, at most.
const SWEEP_LIMIT: i64 = 5_000;

/// The migrations, in order: migration `i` takes the schema from version
/// `i` to `i + 1`. Each is idempotent.
fn migrations(schema: &str) -> [String; 3] {
    [
        format!(
        "CREATE TABLE IF NOT EXISTS \"{schema}\".markers (
             namespace text NOT NULL,
             job_id text NOT NULL,
             payload_hash text NOT NULL,
             queue text NOT NULL,
             committed_at timestamptz NOT NULL,
             expires_at timestamptz NOT NULL,
             follow_ups jsonb,
             PRIMARY KEY (namespace, job_id));
         CREATE INDEX IF NOT EXISTS markers_expires_at ON \"{schema}\".markers USING brin (expires_at);
         CREATE TABLE IF NOT EXISTS \"{schema}\".failures (
             namespace text NOT NULL,
             key text NOT NULL,
             job_id text,
             message_id text NOT NULL,
             attempt integer NOT NULL,
             kind text NOT NULL,
             error text NOT NULL,
             chain jsonb,
             failed_at timestamptz NOT NULL,
             source_queue text NOT NULL,
             payload_hash text NOT NULL,
             expires_at timestamptz NOT NULL,
             PRIMARY KEY (namespace, key));
         CREATE INDEX IF NOT EXISTS failures_expires_at ON \"{schema}\".failures USING brin (expires_at);"
        ),
        // Which deploy failed. A column with a constant default is added
        // without rewriting the table
        // (<https://www.postgresql.org/docs/current/sql-altertable.html#SQL-ALTERTABLE-NOTES>);
        // rows from before read as empty, "not said".
        format!(
            "ALTER TABLE \"{schema}\".failures
                 ADD COLUMN IF NOT EXISTS deploy text NOT NULL DEFAULT '',
                 ADD COLUMN IF NOT EXISTS idemq_version text NOT NULL DEFAULT '';"
        ),
        // Where it failed: NULL when no backtrace was captured, and in
        // rows from before.
        format!("ALTER TABLE \"{schema}\".failures ADD COLUMN IF NOT EXISTS backtrace text;"),
    ]
}

/// The store's schema: `idemq init` creates or upgrades it.
pub struct Schema {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schema")
            .field("schema", &self.inner.sql.schema)
            .finish()
    }
}

impl Schema {
    pub(crate) fn new(inner: Arc<Inner>) -> Self {
        Self { inner }
    }

    /// Creates the schema, or brings it to [`VERSION`]: in one
    /// transaction, under a transaction-scoped advisory lock so that two
    /// `idemq init` at once do not race. A schema newer than this idemq
    /// is refused, not touched.
    async fn migrate(&self) -> Result<Provisioned, ProvisionError> {
        let schema = &self.inner.sql.schema;
        let store = |e: tokio_postgres::Error| ProvisionError::Store(format!("PostgreSQL: {e}"));
        let conn = self
            .inner
            .pool
            .get()
            .await
            .map_err(|e| ProvisionError::Store(format!("cannot connect to PostgreSQL: {e}")))?;
        let client = conn.client();
        client
            .batch_execute(&format!(
                "BEGIN;
                 SELECT pg_advisory_xact_lock(hashtext('idemq schema {schema}'));
                 CREATE SCHEMA IF NOT EXISTS \"{schema}\";
                 CREATE TABLE IF NOT EXISTS \"{schema}\".schema_version (
                     version integer PRIMARY KEY,
                     applied_at timestamptz NOT NULL DEFAULT now());"
            ))
            .await
            .map_err(store)?;
        let found: i32 = client
            .query_typed(
                &format!("SELECT coalesce(max(version), 0) FROM \"{schema}\".schema_version"),
                &[],
            )
            .await
            .map_err(store)?
            .first()
            .map_or(0, |row| row.get(0));
        let name = format!("schema {schema} (version {VERSION})");
        if found > VERSION {
            let _ = client.batch_execute("ROLLBACK").await;
            return Err(ProvisionError::Mismatch {
                resource: format!("schema {schema}"),
                attribute: "version",
                expected: VERSION.to_string(),
                found: found.to_string(),
            });
        }
        for (from, migration) in migrations(schema).iter().enumerate().skip(found as usize) {
            client.batch_execute(migration).await.map_err(store)?;
            client
                .execute_typed(
                    &format!("INSERT INTO \"{schema}\".schema_version (version) VALUES ($1)"),
                    &[(&(from as i32 + 1), Type::INT4)],
                )
                .await
                .map_err(store)?;
        }
        client.batch_execute("COMMIT").await.map_err(store)?;
        conn.release();
        Ok(Provisioned {
            name,
            created: found < VERSION,
        })
    }
}

impl Provision for Schema {
    fn provision<'a>(
        &'a self,
        _violations: &'a mut Vec<String>,
    ) -> BoxFuture<'a, Result<Provisioned, ProvisionError>> {
        Box::pin(self.migrate())
    }
}

impl Inner {
    /// Deletes up to `limit` expired markers and as many expired failure
    /// records; the number deleted.
    pub(super) async fn delete_expired(&self, limit: i64) -> Result<u64, CommitError> {
        let schema = &self.sql.schema;
        let conn = self
            .pool
            .get()
            .await
            .map_err(|e| CommitError::Service(format!("cannot connect to PostgreSQL: {e}")))?;
        let mut deleted = 0;
        for table in ["markers", "failures"] {
            // By ctid, in bounded batches: one statement, no cursor.
            let sql = format!(
                "DELETE FROM \"{schema}\".{table} WHERE ctid = ANY(ARRAY(\
                 SELECT ctid FROM \"{schema}\".{table} WHERE expires_at < now() LIMIT $1))"
            );
            deleted += conn
                .client()
                .execute_typed(&sql, &[(&limit, Type::INT8)])
                .await
                .map_err(|e| CommitError::Service(format!("PostgreSQL: {e}")))?;
        }
        conn.release();
        Ok(deleted)
    }

    /// Whether this environment is due to delete expired rows (its first
    /// commit, then every `sweep_every`); true for one caller only.
    pub(super) fn sweep_due(&self) -> bool {
        let Some(every) = self.sweep_every else {
            return false;
        };
        let now = crate::clock::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let last = self.last_sweep.load(Ordering::Relaxed);
        now >= last + every.as_secs()
            && self
                .last_sweep
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// Deletes expired rows; a failure is logged and tried again when the
    /// next sweep is due.
    pub(super) async fn sweep(&self) {
        match self.delete_expired(SWEEP_LIMIT).await {
            Ok(n) if n > 0 => {
                tracing::info!(deleted = n, "deleted expired markers and failure records")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "deleting expired markers failed"),
        }
    }
}
