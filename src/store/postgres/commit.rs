//! The dedup transaction on PostgreSQL: the job's marker row and the
//! effect's statements in one transaction, pipelined.
//!
//! ```text
//! BEGIN
//! INSERT INTO idemq.markers (namespace, job_id, payload_hash, …) VALUES (…)
//! <the effect's statements, in order>
//! COMMIT
//! ```
//!
//! All of it is written to the connection before the first answer is read:
//! one round trip for a new job, like a plain consumer that pipelines its
//! own transaction. An effect with a row-count check ([`Sql::expect_rows`])
//! waits for the counts before it sends `COMMIT` (two round trips).
//!
//! The marker insert has no `ON CONFLICT` clause on purpose: a job already
//! committed makes it fail with `unique_violation` on the markers' primary
//! key, which aborts the transaction, so the `COMMIT` already on its way
//! ends it as a rollback and none of the effect applies. (With
//! `ON CONFLICT DO NOTHING` the insert would report 0 rows and the
//! pipelined `COMMIT` would apply the effect a second time.) Only then is
//! the stored row read, to tell a duplicate (same payload hash) from a
//! conflict. Two deliveries racing on one job need no lease: the second
//! insert waits for the first transaction's row lock and fails once it
//! commits, or goes on if it rolls back
//! (<https://www.postgresql.org/docs/current/transaction-iso.html>,
//! "Read Committed Isolation Level";
//! <https://www.postgresql.org/docs/current/sql-insert.html>).
//!
//! Errors map to outcomes by SQLSTATE, never by message text
//! (<https://www.postgresql.org/docs/current/errcodes-appendix.html>):
//! [`classify`].
//!
//! [`Sql::expect_rows`]: super::Sql::expect_rows

use std::collections::HashMap;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;
use std::time::SystemTime;

use tokio_postgres::Row;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};

use super::effect::{Effect, EffectError};
use super::pool::{Conn, OpenError};
use super::{Inner, outbox};
use crate::commit::{CommitError, CommitOutcome, InvalidEffect, JobRef, Marker};
use crate::followup::StoredMarker;
use crate::horizon::ReplayHorizon;
use crate::job::{JobId, PayloadHash};
use crate::store::{LookedUp, Settled};

/// One request of a pipeline, answered with its row count.
pub(super) type Pending<'a> =
    Pin<Box<dyn Future<Output = Result<u64, tokio_postgres::Error>> + Send + 'a>>;

/// How one try of the transaction ended.
pub(super) enum Step {
    /// Marker and effect are committed.
    Committed,
    /// The job's marker exists: nothing applied; read it to decide.
    MarkerExists,
    /// Nothing applied, for this reason.
    Outcome(CommitOutcome),
    /// The connection broke; whether `COMMIT` took effect is unknown.
    Broken(String),
}

/// A job's marker row, as the insert sends it.
pub(super) struct MarkerRow<'a> {
    namespace: &'a str,
    job_id: &'a str,
    hash: &'a str,
    queue: &'a str,
    now: SystemTime,
    expires: SystemTime,
    follow_ups: Option<String>,
}

impl<'a> MarkerRow<'a> {
    pub(super) fn new(inner: &'a Inner, job: JobRef<'a>, effect: &Effect, now: SystemTime) -> Self {
        Self {
            namespace: inner.namespace_for(job.queue),
            job_id: job.id.as_str(),
            hash: job.payload_hash.as_str(),
            queue: job.queue,
            now,
            expires: now + inner.marker_ttl,
            follow_ups: outbox::encode(effect.follow_ups()),
        }
    }

    /// The insert's parameters, with their types (`insert_marker`'s order).
    pub(super) fn params(&self) -> [(&(dyn ToSql + Sync), Type); 7] {
        [
            (&self.namespace, Type::TEXT),
            (&self.job_id, Type::TEXT),
            (&self.hash, Type::TEXT),
            (&self.queue, Type::TEXT),
            (&self.now, Type::TIMESTAMPTZ),
            (&self.expires, Type::TIMESTAMPTZ),
            (&self.follow_ups, Type::TEXT),
        ]
    }
}

impl From<EffectError> for CommitError {
    fn from(e: EffectError) -> Self {
        Self::Effect(InvalidEffect::new(e))
    }
}

impl Inner {
    /// Commits `effect` for `job`, and for a duplicate returns the marker
    /// as stored. A connection that breaks is replaced once within the
    /// call: the marker makes the second try safe (if the first one
    /// committed, the second finds its marker and is a duplicate).
    pub(super) async fn settle(
        &self,
        job: JobRef<'_>,
        effect: &Effect,
    ) -> Result<Settled, CommitError> {
        effect.validate()?;
        let now = crate::clock::now();
        let mut broken = String::new();
        for retry in [false, true] {
            let mut conn = match self.connection(retry).await {
                Ok(c) => c,
                Err(settled) => return settled.map(Settled::new),
            };
            let (step, clean) = self.transact(&mut conn, job, effect, now).await?;
            let settled = match step {
                Step::Committed => Settled::new(CommitOutcome::Committed),
                Step::Outcome(o) => Settled::new(o),
                Step::MarkerExists => return self.settle_existing(conn, clean, job).await,
                Step::Broken(reason) => {
                    broken = reason;
                    continue;
                }
            };
            if clean {
                conn.release();
            }
            return Ok(settled);
        }
        Ok(Settled::new(CommitOutcome::Transient {
            reason: format!(
                "the connection broke twice, the second time with: {broken}; if a COMMIT was on its way, the job's marker settles it on the next attempt"
            ),
        }))
    }

    /// The job's marker refused the commit: a duplicate or a conflict, as
    /// the stored row says, read on `conn` if it is `clean` (else on a new
    /// connection: never two held at once, so a pool of one cannot wait
    /// on itself).
    async fn settle_existing(
        &self,
        conn: Conn<'_>,
        clean: bool,
        job: JobRef<'_>,
    ) -> Result<Settled, CommitError> {
        let mut conn = if clean {
            conn
        } else {
            drop(conn);
            match self.connection(true).await {
                Ok(c) => c,
                Err(settled) => return settled.map(Settled::new),
            }
        };
        let namespace = [self.namespace_for(job.queue)];
        match self
            .read_rows(&mut conn, &namespace, &[job.id.as_str()])
            .await
        {
            Ok(rows) => {
                conn.release();
                Ok(match rows.first() {
                    Some(row) => self.compare(job, row),
                    None => Settled::new(CommitOutcome::Transient {
                        reason: "the job's marker refused the commit, then was gone (expired and swept meanwhile)".into(),
                    }),
                })
            }
            Err(e) => classify(&e, None).map(|step| Settled::new(outcome_of(step))),
        }
    }

    /// A connection (a fresh one on a retry), or the outcome when none can
    /// be opened.
    pub(super) async fn connection(
        &self,
        fresh: bool,
    ) -> Result<Conn<'_>, Result<CommitOutcome, CommitError>> {
        let got = if fresh {
            self.pool.fresh().await
        } else {
            self.pool.get().await
        };
        got.map_err(|e| match e {
            OpenError::Config(msg) => Err(CommitError::Invalid(format!(
                "cannot connect to PostgreSQL: {msg}"
            ))),
            // A deployment error, retried and alarmed as one.
            OpenError::Tls(msg) => Err(CommitError::AccessDenied {
                needs: "a server certificate for the host named in IDEMQ_POSTGRES_URL that the system's roots or IDEMQ_POSTGRES_CA_FILE trust".into(),
                message: msg,
            }),
            OpenError::Postgres(e) => classify(&e, None).map(outcome_of),
        })
    }

    /// One try: the pipelined transaction, and whether the connection is
    /// left outside any transaction (reusable).
    async fn transact(
        &self,
        conn: &mut Conn<'_>,
        job: JobRef<'_>,
        effect: &Effect,
        now: SystemTime,
    ) -> Result<(Step, bool), CommitError> {
        let row = MarkerRow::new(self, job, effect, now);
        let marker = row.params();
        let commit_now = !effect.checks_rows();
        // With prepared statements: each one named on this connection,
        // prepared on its first use (before the transaction opens).
        let prepared = if self.prepare {
            let mut wanted = vec![(
                self.sql.insert_marker.as_str(),
                marker.iter().map(|(_, t)| t.clone()).collect(),
            )];
            wanted.extend(
                effect
                    .statements()
                    .iter()
                    .map(|s| (s.text(), s.param_types().cloned().collect())),
            );
            match conn.prepared(&wanted).await {
                Ok(statements) => Some(statements),
                Err((i, e)) => {
                    let step = classify(&e, i.checked_sub(1))?;
                    return Ok((step, !conn.client().is_closed()));
                }
            }
        } else {
            None
        };
        let client = conn.client();
        // The parameters as the chosen path sends them: values alone to a
        // prepared statement (it knows their types), values with their
        // types to an unnamed one.
        let typed: Vec<_> = effect.statements().iter().map(|s| s.params_ref()).collect();
        let untyped: Vec<Vec<&(dyn ToSql + Sync)>> = match &prepared {
            Some(_) => std::iter::once(&marker[..])
                .chain(typed.iter().map(Vec::as_slice))
                .map(values)
                .collect(),
            None => Vec::new(),
        };

        let mut requests: Vec<Pending<'_>> = Vec::with_capacity(typed.len() + 3);
        requests.push(Box::pin(async {
            client.batch_execute("BEGIN").await.map(|()| 0)
        }));
        match &prepared {
            Some(statements) => {
                for (statement, p) in statements.iter().zip(&untyped) {
                    requests.push(Box::pin(client.execute(statement, p)));
                }
            }
            None => {
                requests.push(Box::pin(
                    client.execute_typed(&self.sql.insert_marker, &marker),
                ));
                for (s, p) in effect.statements().iter().zip(&typed) {
                    requests.push(Box::pin(client.execute_typed(s.text(), p)));
                }
            }
        }
        if commit_now {
            requests.push(Box::pin(async {
                client.batch_execute("COMMIT").await.map(|()| 0)
            }));
        }
        let mut answers = in_order(requests).await.into_iter();
        let begun = answers.next().expect("BEGIN was sent");
        let inserted = answers.next().expect("the marker was sent");
        let counts: Vec<_> = answers.by_ref().take(typed.len()).collect();
        let committed = answers.next();

        // Whether the transaction is still open: only when COMMIT was
        // held back and the connection is alive.
        let open = !commit_now && !client.is_closed();
        let step = match self.judge(begun, inserted, &counts, effect)? {
            Some(step) => step,
            None if commit_now => match committed.expect("COMMIT was sent") {
                Ok(_) => Step::Committed,
                Err(e) => classify(&e, Some(counts.len().saturating_sub(1)))?,
            },
            None => match client.batch_execute("COMMIT").await {
                Ok(()) => return Ok((Step::Committed, true)),
                Err(e) => {
                    return Ok((
                        classify(&e, Some(counts.len().saturating_sub(1)))?,
                        !client.is_closed(),
                    ));
                }
            },
        };
        if open {
            let rolled_back = client.batch_execute("ROLLBACK").await.is_ok();
            return Ok((step, rolled_back));
        }
        Ok((step, !client.is_closed()))
    }

    /// The step the answers before `COMMIT` decide, or `None` when they
    /// all succeeded (and their row counts are as expected).
    pub(super) fn judge(
        &self,
        begun: Result<u64, tokio_postgres::Error>,
        inserted: Result<u64, tokio_postgres::Error>,
        counts: &[Result<u64, tokio_postgres::Error>],
        effect: &Effect,
    ) -> Result<Option<Step>, CommitError> {
        if let Err(e) = begun {
            return classify(&e, None).map(Some);
        }
        if let Err(e) = inserted {
            if self.is_marker_conflict(&e) {
                return Ok(Some(Step::MarkerExists));
            }
            return classify(&e, None).map(Some);
        }
        for (index, (count, statement)) in counts.iter().zip(effect.statements()).enumerate() {
            match count {
                // A statement after the first failure only says that the
                // transaction is aborted; the first failure is the cause.
                Err(e) => return classify(e, Some(index)).map(Some),
                Ok(rows) => {
                    if let Some(expect) = statement.expect
                        && *rows != expect.rows
                    {
                        let reason = format!(
                            "statement {index} changed {rows} rows, {} expected",
                            expect.rows
                        );
                        return Ok(Some(Step::Outcome(if expect.optimistic {
                            CommitOutcome::Contended { index, reason }
                        } else {
                            CommitOutcome::Rejected { index, reason }
                        })));
                    }
                }
            }
        }
        Ok(None)
    }

    /// Whether `e` is the markers' primary key refusing a second marker of
    /// one job.
    fn is_marker_conflict(&self, e: &tokio_postgres::Error) -> bool {
        e.as_db_error().is_some_and(|db| {
            *db.code() == SqlState::UNIQUE_VIOLATION
                && db.schema() == Some(self.sql.schema.as_str())
                && db.table() == Some("markers")
        })
    }

    /// A duplicate or a conflict, as the stored row says.
    fn compare(&self, job: JobRef<'_>, row: &Row) -> Settled {
        let stored_hash: String = row.get("payload_hash");
        if stored_hash != job.payload_hash.as_str() {
            return Settled::new(CommitOutcome::Conflict {
                stored_hash: PayloadHash::from_hex(stored_hash),
            });
        }
        Settled::duplicate(StoredMarker {
            follow_ups: outbox::decode(row.get::<_, Option<&str>>("follow_ups")),
            job_id: job.id.to_string(),
            committed_at: Some(row.get("committed_at")),
            horizon: ReplayHorizon::new(self.marker_ttl),
        })
    }

    /// The marker rows of `jobs` (namespace, job id) in one statement.
    async fn read_rows(
        &self,
        conn: &mut Conn<'_>,
        namespaces: &[&str],
        ids: &[&str],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        if self.prepare {
            let wanted = [(
                self.sql.select_markers.as_str(),
                vec![Type::TEXT_ARRAY, Type::TEXT_ARRAY],
            )];
            let statement = conn.prepared(&wanted).await.map_err(|(_, e)| e)?;
            conn.client()
                .query(&statement[0], &[&namespaces, &ids])
                .await
        } else {
            conn.client()
                .query_typed(
                    &self.sql.select_markers,
                    &[(&namespaces, Type::TEXT_ARRAY), (&ids, Type::TEXT_ARRAY)],
                )
                .await
        }
    }

    /// The markers of `jobs`, read before their handlers run: one
    /// statement for all of them (`namespace = ANY($1) AND job_id =
    /// ANY($2)`), so a batch pays one round trip. One result per job, in
    /// order; a failed read is every job's failure (they shared it).
    pub(super) async fn look_up(&self, jobs: &[JobRef<'_>]) -> Vec<Result<LookedUp, CommitError>> {
        if jobs.is_empty() {
            return Vec::new();
        }
        let mut namespaces: Vec<&str> = jobs.iter().map(|j| self.namespace_for(j.queue)).collect();
        namespaces.sort_unstable();
        namespaces.dedup();
        let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
        let rows = match self.read(&namespaces, &ids).await {
            Ok(rows) => rows,
            Err(failure) => {
                return jobs
                    .iter()
                    .map(|_| match &failure {
                        Ok(outcome) => Ok(LookedUp::Settled(Settled::new(outcome.clone()))),
                        Err(e) => Err(e.shared()),
                    })
                    .collect();
            }
        };
        // With several namespaces the statement may also return another
        // namespace's marker of a job id: each job takes only its own.
        let by_key: HashMap<(String, String), Row> = rows
            .into_iter()
            .map(|row| ((row.get("namespace"), row.get("job_id")), row))
            .collect();
        jobs.iter()
            .map(|job| {
                let key = (
                    self.namespace_for(job.queue).to_owned(),
                    job.id.as_str().to_owned(),
                );
                Ok(match by_key.get(&key) {
                    None => LookedUp::Absent,
                    Some(row) => LookedUp::Settled(self.compare(*job, row)),
                })
            })
            .collect()
    }

    /// The marker of `job_id` as committed from `queue`.
    pub(super) async fn read_marker(
        &self,
        queue: &str,
        job_id: &JobId,
    ) -> Result<Option<Marker>, CommitError> {
        let rows = match self
            .read(&[self.namespace_for(queue)], &[job_id.as_str()])
            .await
        {
            Ok(rows) => rows,
            Err(Ok(outcome)) => return Err(CommitError::Service(format!("{outcome:?}"))),
            Err(Err(e)) => return Err(e),
        };
        Ok(rows.into_iter().next().map(|row| Marker {
            job_id: job_id.to_string(),
            payload_hash: PayloadHash::from_hex(row.get::<_, String>("payload_hash")),
            committed_at: Some(row.get("committed_at")),
            queue: row.get("queue"),
            expires_at: row.get("expires_at"),
        }))
    }

    /// Reads marker rows, on a fresh connection once if the pooled one
    /// broke; a failure is the outcome it amounts to, or the error.
    async fn read(
        &self,
        namespaces: &[&str],
        ids: &[&str],
    ) -> Result<Vec<Row>, Result<CommitOutcome, CommitError>> {
        let mut last = String::new();
        for retry in [false, true] {
            let mut conn = self.connection(retry).await?;
            match self.read_rows(&mut conn, namespaces, ids).await {
                Ok(rows) => {
                    conn.release();
                    return Ok(rows);
                }
                Err(e) => match classify(&e, None) {
                    Ok(Step::Broken(reason)) => last = reason,
                    Ok(step) => return Err(Ok(outcome_of(step))),
                    Err(e) => return Err(Err(e)),
                },
            }
        }
        Err(Ok(CommitOutcome::Transient { reason: last }))
    }
}

/// The values of typed parameters, for a prepared statement (which knows
/// their types).
fn values<'a>(params: &[(&'a (dyn ToSql + Sync), Type)]) -> Vec<&'a (dyn ToSql + Sync)> {
    params.iter().map(|(v, _)| *v).collect()
}

/// Drives `requests` to their answers, polling them first to last: each
/// writes its request when first polled, so they reach the server in this
/// order, all before the first answer is awaited (tokio-postgres
/// pipelines requests that are polled together: its crate documentation,
/// "Pipelining").
pub(super) async fn in_order(
    mut requests: Vec<Pending<'_>>,
) -> Vec<Result<u64, tokio_postgres::Error>> {
    let mut answers: Vec<Option<Result<u64, tokio_postgres::Error>>> =
        requests.iter().map(|_| None).collect();
    poll_fn(|cx| {
        let mut waiting = false;
        for (request, answer) in requests.iter_mut().zip(answers.iter_mut()) {
            if answer.is_none() {
                match request.as_mut().poll(cx) {
                    Poll::Ready(a) => *answer = Some(a),
                    Poll::Pending => waiting = true,
                }
            }
        }
        if waiting {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    answers
        .into_iter()
        .map(|a| a.expect("every request was answered"))
        .collect()
}

/// The outcome a step that applied nothing amounts to.
fn outcome_of(step: Step) -> CommitOutcome {
    match step {
        Step::Outcome(o) => o,
        Step::Broken(reason) => CommitOutcome::Transient { reason },
        Step::Committed | Step::MarkerExists => CommitOutcome::Transient {
            reason: "unexpected answer from PostgreSQL".into(),
        },
    }
}

/// A server error in its own words: SQLSTATE, constraint and message
/// (tokio-postgres's `Display` of it says only "db error").
fn db_reason(db: &tokio_postgres::error::DbError) -> String {
    let code = db.code().code();
    match db.constraint() {
        Some(c) => format!("SQLSTATE {code} on constraint {c}: {}", db.message()),
        None => format!("SQLSTATE {code}: {}", db.message()),
    }
}

/// `e` in words a log can act on: a server error's SQLSTATE and message,
/// or the client's own error.
pub(super) fn describe(e: &tokio_postgres::Error) -> String {
    e.as_db_error().map_or_else(|| e.to_string(), db_reason)
}

/// Whether `e` broke the connection (class 08, a shutdown, a closed
/// socket), so that the same request may be tried on a fresh one.
pub(super) fn broke_connection(e: &tokio_postgres::Error) -> bool {
    matches!(classify(e, None), Ok(Step::Broken(_)))
}

/// What an error of statement `index` (`None`: idemq's own SQL) means, by
/// SQLSTATE class:
///
/// - `40001` serialization failure (Aurora DSQL's optimistic-concurrency
///   conflicts among them), `40P01` deadlock, `55P03` lock not available:
///   a lost race, [`CommitOutcome::Collided`], run again in the
///   invocation;
/// - class 23 (integrity constraint) and class 22 (data exception) in the
///   effect's SQL: the job's own data is refused, the handler's business
///   outcome, [`CommitOutcome::Rejected`];
/// - `42P01` undefined table, `42501` insufficient privilege: a deployment
///   error; the rest of class 42 and class 0A (syntax, undefined column,
///   feature not supported): the SQL is wrong, [`CommitError::Invalid`];
/// - class 08 (connection exception), `57P01`–`57P03` (shutdown, cannot
///   connect now) and a closed connection: the connection broke;
/// - anything else (class 53 insufficient resources, `57014` statement
///   timeout, …): [`CommitOutcome::Transient`].
pub(super) fn classify(
    e: &tokio_postgres::Error,
    index: Option<usize>,
) -> Result<Step, CommitError> {
    let which = index.map_or_else(
        || "idemq's marker SQL".to_owned(),
        |i| format!("statement {i}"),
    );
    let Some(db) = e.as_db_error() else {
        if e.is_closed() {
            return Ok(Step::Broken(format!("connection closed: {e}")));
        }
        if std::error::Error::source(e).is_some_and(|s| {
            s.downcast_ref::<tokio_postgres::types::WrongType>()
                .is_some()
        }) {
            return Err(CommitError::Invalid(format!("{which}: {e}")));
        }
        // I/O errors, timeouts and protocol errors of the client.
        return Ok(Step::Broken(e.to_string()));
    };
    let code = db.code().code();
    let reason = db_reason(db);
    let class = &code[..2];
    Ok(match (code, class) {
        ("40001" | "40P01" | "55P03", _) => Step::Outcome(CommitOutcome::Collided { reason }),
        (_, "23" | "22") if index.is_some() => Step::Outcome(CommitOutcome::Rejected {
            index: index.unwrap_or_default(),
            reason,
        }),
        ("42P01", _) => {
            return Err(CommitError::TableNotFound(format!(
                "{} ({which}; for idemq's own tables, run `idemq init`)",
                db.message()
            )));
        }
        ("42501", _) => {
            return Err(CommitError::AccessDenied {
                needs: format!("the privileges {which} uses"),
                message: db.message().to_owned(),
            });
        }
        ("28000" | "28P01", _) => {
            return Err(CommitError::AccessDenied {
                needs: "a login the server accepts (password, or an IAM token for a user granted rds_iam)".into(),
                message: db.message().to_owned(),
            });
        }
        (_, "42" | "0A" | "3D" | "3F") => {
            return Err(CommitError::Invalid(format!("{which}: {reason}")));
        }
        (_, "08") | ("57P01" | "57P02" | "57P03", _) => Step::Broken(reason),
        _ => Step::Outcome(CommitOutcome::Transient { reason }),
    })
}
