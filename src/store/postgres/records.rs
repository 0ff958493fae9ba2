//! Failure records on PostgreSQL: one row per failed job in
//! `<schema>.failures` (the latest attempt replaces the one before), keyed
//! by the consumer's namespace and `job#<job id>` (or `message#<message
//! id>` for a message without a valid job id), kept as long as the
//! markers.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};

use super::Inner;
use super::commit::{broke_connection, describe};
use super::pool::OpenError;
use crate::failure::{
    DlqError, Failure, FailureKind, FailureRecord, LetterKey, MAX_RECORD_BACKTRACE,
    MAX_RECORD_ERROR, capped_chain, truncate,
};

/// The failure records of one store.
pub(crate) struct Records {
    inner: Arc<Inner>,
    upsert: String,
    select: String,
}

impl std::fmt::Debug for Records {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Records")
            .field("schema", &self.inner.sql.schema)
            .finish()
    }
}

/// A record's key within its namespace.
fn key(job_id: Option<&str>, message_id: &str) -> String {
    match job_id {
        Some(id) => format!("job#{id}"),
        None => format!("message#{message_id}"),
    }
}

impl Records {
    pub(crate) fn new(inner: Arc<Inner>) -> Self {
        let schema = &inner.sql.schema;
        Self {
            upsert: format!(
                "INSERT INTO \"{schema}\".failures \
                 (namespace, key, job_id, message_id, attempt, kind, error, chain, failed_at, \
                  source_queue, payload_hash, expires_at, deploy, idemq_version, backtrace) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10, $11, $12, $13, $14, $15) \
                 ON CONFLICT (namespace, key) DO UPDATE SET \
                 job_id = EXCLUDED.job_id, message_id = EXCLUDED.message_id, \
                 attempt = EXCLUDED.attempt, kind = EXCLUDED.kind, error = EXCLUDED.error, \
                 chain = EXCLUDED.chain, failed_at = EXCLUDED.failed_at, \
                 source_queue = EXCLUDED.source_queue, payload_hash = EXCLUDED.payload_hash, \
                 expires_at = EXCLUDED.expires_at, deploy = EXCLUDED.deploy, \
                 idemq_version = EXCLUDED.idemq_version, backtrace = EXCLUDED.backtrace"
            ),
            select: format!(
                "SELECT namespace, key, job_id, message_id, attempt, kind, error, chain::text AS chain, \
                 failed_at, source_queue, payload_hash, deploy, idemq_version, backtrace FROM \"{schema}\".failures \
                 WHERE namespace = ANY($1) AND key = ANY($2)"
            ),
            inner,
        }
    }

    /// The namespaces a read looks in: the store's own, else those of the
    /// source queues.
    fn namespaces(&self, sources: &[String]) -> Vec<String> {
        match &self.inner.namespace {
            Some(ns) => vec![ns.clone()],
            None => sources
                .iter()
                .map(|q| crate::config::queue_name(q).to_owned())
                .collect(),
        }
    }

    pub(crate) async fn put(&self, rec: &FailureRecord) -> Result<(), DlqError> {
        let namespace = self.inner.namespace_for(&rec.source_queue).to_owned();
        let key = key(rec.job_id.as_deref(), &rec.message_id);
        let error = truncate(&rec.failure.error, MAX_RECORD_ERROR);
        let chain = serde_json::to_string(&capped_chain(&rec.failure.chain))
            .map_err(|e| DlqError::Store(e.to_string()))?;
        let attempt = i32::try_from(rec.attempt).unwrap_or(i32::MAX);
        let kind = rec.failure.kind.as_str();
        let expires = rec.failed_at + self.inner.marker_ttl;
        let backtrace = rec
            .failure
            .backtrace
            .as_deref()
            .map(|bt| truncate(bt, MAX_RECORD_BACKTRACE));
        let params: [(&(dyn ToSql + Sync), Type); 15] = [
            (&namespace, Type::TEXT),
            (&key, Type::TEXT),
            (&rec.job_id, Type::TEXT),
            (&rec.message_id, Type::TEXT),
            (&attempt, Type::INT4),
            (&kind, Type::TEXT),
            (&error, Type::TEXT),
            (&chain, Type::TEXT),
            (&rec.failed_at, Type::TIMESTAMPTZ),
            (&rec.source_queue, Type::TEXT),
            (&rec.payload_hash, Type::TEXT),
            (&expires, Type::TIMESTAMPTZ),
            (&rec.deploy, Type::TEXT),
            (&rec.idemq_version, Type::TEXT),
            (&backtrace, Type::TEXT),
        ];
        // A connection that broke (the server restarted or failed over,
        // a proxy cut it) is tried once more on a fresh one, as a commit
        // is: the record is often the context of that very outage. The
        // upsert is idempotent, so a write that took before the break is
        // written again unchanged.
        let mut broken = String::new();
        for fresh in [false, true] {
            let got = if fresh {
                self.inner.pool.fresh().await
            } else {
                self.inner.pool.get().await
            };
            let conn = match got {
                Ok(conn) => conn,
                Err(OpenError::Postgres(e)) if broke_connection(&e) => {
                    broken = describe(&e);
                    continue;
                }
                Err(e) => return Err(open_error(e)),
            };
            match conn.client().execute_typed(&self.upsert, &params).await {
                Ok(_) => {
                    conn.release();
                    return Ok(());
                }
                // Dropped, not released: the pool opens a new one.
                Err(e) if broke_connection(&e) => broken = describe(&e),
                Err(e) => return Err(store_error(&e)),
            }
        }
        Err(DlqError::Store(format!(
            "PostgreSQL: the connection broke, and again on a new one: {broken}"
        )))
    }

    pub(crate) async fn one(
        &self,
        sources: &[String],
        job_id: Option<&str>,
        message_id: &str,
    ) -> Result<Option<FailureRecord>, DlqError> {
        let wanted = [(job_id.map(str::to_owned), message_id.to_owned())];
        Ok(self.many(sources, &wanted).await?.into_values().next())
    }

    pub(crate) async fn many(
        &self,
        sources: &[String],
        wanted: &[LetterKey],
    ) -> Result<HashMap<LetterKey, FailureRecord>, DlqError> {
        let namespaces = self.namespaces(sources);
        // Several letters may share a key: the copies of one job (a
        // producer that re-sent it) each get the job's record.
        let mut by_key: HashMap<String, Vec<&LetterKey>> = HashMap::new();
        for w in wanted {
            by_key.entry(key(w.0.as_deref(), &w.1)).or_default().push(w);
        }
        if by_key.is_empty() || namespaces.is_empty() {
            return Ok(HashMap::new());
        }
        let keys: Vec<&String> = by_key.keys().collect();
        let conn = self.inner.pool.get().await.map_err(open_error)?;
        let rows = conn
            .client()
            .query_typed(
                &self.select,
                &[(&namespaces, Type::TEXT_ARRAY), (&keys, Type::TEXT_ARRAY)],
            )
            .await
            .map_err(|e| store_error(&e))?;
        conn.release();
        // The namespaces in the order given: the first one that holds a
        // record of a letter wins.
        let rank = |ns: &str| {
            namespaces
                .iter()
                .position(|n| n == ns)
                .unwrap_or(usize::MAX)
        };
        let mut best: HashMap<String, (usize, FailureRecord)> = HashMap::new();
        for row in rows {
            let ns: String = row.get("namespace");
            let k: String = row.get("key");
            let record = parse(&row)?;
            let r = rank(&ns);
            if best.get(&k).is_none_or(|(have, _)| r < *have) {
                best.insert(k, (r, record));
            }
        }
        let mut found = HashMap::new();
        for (k, (_, record)) in best {
            for letter in by_key.get(&k).into_iter().flatten() {
                found.insert((*letter).clone(), record.clone());
            }
        }
        Ok(found)
    }
}

fn parse(row: &Row) -> Result<FailureRecord, DlqError> {
    let chain: Option<String> = row.get("chain");
    let chain: Vec<String> = match chain {
        Some(c) => serde_json::from_str(&c).map_err(|e| DlqError::Store(e.to_string()))?,
        None => Vec::new(),
    };
    let kind: String = row.get("kind");
    let attempt: i32 = row.get("attempt");
    Ok(FailureRecord {
        job_id: row.get("job_id"),
        message_id: row.get("message_id"),
        attempt: u32::try_from(attempt).unwrap_or_default(),
        failure: Failure {
            kind: FailureKind::parse(&kind).unwrap_or(FailureKind::Permanent),
            error: row.get("error"),
            chain,
            backtrace: row.get("backtrace"),
        },
        failed_at: row.get::<_, SystemTime>("failed_at"),
        source_queue: row.get("source_queue"),
        payload_hash: row.get("payload_hash"),
        deploy: row.get("deploy"),
        idemq_version: row.get("idemq_version"),
    })
}

fn store_error(e: &tokio_postgres::Error) -> DlqError {
    DlqError::Store(format!("PostgreSQL: {}", describe(e)))
}

fn open_error(e: OpenError) -> DlqError {
    match e {
        OpenError::Postgres(e) => store_error(&e),
        other => DlqError::Store(format!("PostgreSQL: {other}")),
    }
}
