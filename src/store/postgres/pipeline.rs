//! A batch's commits in one round trip: the transactions of its jobs
//! written one after another on a connection before the first answer is
//! read.
//!
//! ```text
//! BEGIN; INSERT marker of a; <a's statements>; COMMIT
//! BEGIN; INSERT marker of b; <b's statements>; COMMIT
//! …
//! ```
//!
//! A batch's jobs are spread over a few such pipelines, each on its own
//! connection and all sent at once ([`PIPELINES`]), so that the server
//! works on them in parallel, as it does on a plain consumer's
//! connections, while the batch still waits one round trip.
//!
//! Each job is still a transaction of its own. Every statement goes as its
//! own extended-query message group ending in `Sync`, so an error skips
//! only the rest of that statement's group
//! (<https://www.postgresql.org/docs/current/protocol-flow.html#PROTOCOL-FLOW-EXT-QUERY>,
//! and "Pipelining" on the same page): the job's later statements fail as
//! its transaction is aborted, its `COMMIT` ends it as a rollback, and the
//! next job's `BEGIN` opens a fresh transaction. Each job's answers are
//! judged as the single-job pipeline judges them (src/store/postgres/commit.rs).
//!
//! A connection that breaks in the middle leaves the jobs whose `COMMIT`
//! was answered committed, and the rest unknown: those are settled again
//! one by one on a fresh connection, where the marker decides (a job whose
//! `COMMIT` took effect without its answer arriving finds its own marker
//! and is a duplicate). A job whose marker already exists is told
//! duplicate from conflict by one read of all such markers.
//!
//! Not pipelined with the others (settled alone, side by side): an effect
//! with a row-count check (its `COMMIT` waits for the counts), an invalid
//! effect (refused before any I/O), and every job when statements are
//! prepared (`IDEMQ_POSTGRES_PREPARE`).

use std::time::SystemTime;

use tokio_postgres::types::{ToSql, Type};

use super::Inner;
use super::commit::{MarkerRow, Pending, Step, classify, in_order};
use super::effect::Effect;
use crate::commit::{CommitError, CommitOutcome, JobRef};
use crate::store::{LookedUp, Settled};

/// A commit's result.
type Answer = Result<Settled, CommitError>;

/// A statement's parameters with their types, as an unnamed statement
/// sends them.
type Params<'a> = Vec<(&'a (dyn ToSql + Sync), Type)>;

impl Inner {
    /// Commits `jobs`, each in a transaction of its own, pipelined on one
    /// connection where they can be: one result per job, in order.
    pub(super) async fn settle_batch(&self, jobs: &[(JobRef<'_>, &Effect)]) -> Vec<Answer> {
        let (piped, alone): (Vec<usize>, Vec<usize>) = (0..jobs.len()).partition(|&i| {
            let effect = jobs[i].1;
            !self.prepare && !effect.checks_rows() && effect.validate().is_ok()
        });
        let (piped, alone) = if piped.len() < 2 {
            (Vec::new(), (0..jobs.len()).collect())
        } else {
            (piped, alone)
        };
        let singles = futures_util::future::join_all(
            alone.iter().map(|&i| self.settle(jobs[i].0, jobs[i].1)),
        );
        let picked: Vec<(JobRef<'_>, &Effect)> = piped.iter().map(|&i| jobs[i]).collect();
        let (singles, pipelined) = tokio::join!(singles, self.pipeline(&picked));
        let mut answers: Vec<Option<Answer>> = Vec::new();
        answers.resize_with(jobs.len(), || None);
        place(&mut answers, alone, singles);
        place(&mut answers, piped, pipelined);
        answers
            .into_iter()
            .map(|a| a.expect("every job was settled"))
            .collect()
    }

    /// The pipelines of `jobs` (each valid, none checking row counts), side
    /// by side on up to [`PIPELINES`] connections: each job's answer, in
    /// order, the ones they left unknown settled again, and the jobs whose
    /// marker exists read back in one statement for all pipelines.
    async fn pipeline(&self, jobs: &[(JobRef<'_>, &Effect)]) -> Vec<Answer> {
        if jobs.is_empty() {
            return Vec::new();
        }
        let now = crate::clock::now();
        let size = jobs.len().div_ceil(pipelines(jobs.len()));
        let chunks = jobs.chunks(size);
        let sent =
            futures_util::future::join_all(chunks.clone().map(|c| self.send_on_one(c, now))).await;
        let mut answers: Vec<Option<Answer>> = Vec::new();
        answers.resize_with(jobs.len(), || None);
        let mut steps = Vec::with_capacity(jobs.len());
        for (chunk, got) in chunks.zip(sent) {
            match got {
                Ok(chunk_steps) => steps.extend(chunk_steps.into_iter().map(Some)),
                // No connection: what that amounts to is each of its jobs'
                // answer.
                Err(failure) => {
                    for _ in chunk {
                        answers[steps.len()] = Some(shared(&failure));
                        steps.push(None);
                    }
                }
            }
        }
        let mut existing = Vec::new();
        let mut broken = Vec::new();
        for (i, step) in steps.into_iter().enumerate() {
            let Some(step) = step else { continue };
            match step {
                Ok(Step::Committed) => {
                    answers[i] = Some(Ok(Settled::new(CommitOutcome::Committed)))
                }
                Ok(Step::Outcome(o)) => answers[i] = Some(Ok(Settled::new(o))),
                Ok(Step::MarkerExists) => existing.push(i),
                Ok(Step::Broken(_)) => broken.push(i),
                Err(e) => answers[i] = Some(Err(e)),
            }
        }
        // The marker decides, on a fresh connection each: committed before
        // the break (a duplicate now), or not (committed now).
        let again = futures_util::future::join_all(
            broken.iter().map(|&i| self.settle(jobs[i].0, jobs[i].1)),
        );
        let (again, compared) = tokio::join!(again, self.compare_existing(jobs, &existing));
        place(&mut answers, broken, again);
        place(&mut answers, existing, compared);
        answers
            .into_iter()
            .map(|a| a.expect("every pipelined job was judged"))
            .collect()
    }

    /// One pipeline of `jobs` on a connection of its own: how each job's
    /// transaction ended, or, without a connection, what that amounts to.
    async fn send_on_one(
        &self,
        jobs: &[(JobRef<'_>, &Effect)],
        now: SystemTime,
    ) -> Result<Vec<Result<Step, CommitError>>, Result<CommitOutcome, CommitError>> {
        let mut conn = self.connection(false).await?;
        let steps = self.send_all(&mut conn, jobs, now).await;
        if !conn.client().is_closed() {
            conn.release();
        }
        Ok(steps)
    }

    /// Writes every job's transaction, then reads the answers: how each
    /// one ended.
    async fn send_all(
        &self,
        conn: &mut super::pool::Conn<'_>,
        jobs: &[(JobRef<'_>, &Effect)],
        now: SystemTime,
    ) -> Vec<Result<Step, CommitError>> {
        let client = conn.client();
        let rows: Vec<MarkerRow<'_>> = jobs
            .iter()
            .map(|(job, effect)| MarkerRow::new(self, *job, effect, now))
            .collect();
        let markers: Vec<[(&(dyn ToSql + Sync), Type); 7]> =
            rows.iter().map(MarkerRow::params).collect();
        let typed: Vec<Vec<Params<'_>>> = jobs
            .iter()
            .map(|(_, effect)| effect.statements().iter().map(|s| s.params_ref()).collect())
            .collect();
        let mut requests: Vec<Pending<'_>> = Vec::new();
        for (((_, effect), marker), params) in jobs.iter().zip(&markers).zip(&typed) {
            requests.push(Box::pin(async {
                client.batch_execute("BEGIN").await.map(|()| 0)
            }));
            requests.push(Box::pin(
                client.execute_typed(&self.sql.insert_marker, marker),
            ));
            for (s, p) in effect.statements().iter().zip(params) {
                requests.push(Box::pin(client.execute_typed(s.text(), p)));
            }
            requests.push(Box::pin(async {
                client.batch_execute("COMMIT").await.map(|()| 0)
            }));
        }
        let mut answers = in_order(requests).await.into_iter();
        jobs.iter()
            .map(|(_, effect)| {
                let begun = answers.next().expect("BEGIN was sent");
                let inserted = answers.next().expect("the marker was sent");
                let counts: Vec<_> = answers.by_ref().take(effect.statements().len()).collect();
                let committed = answers.next().expect("COMMIT was sent");
                match self.judge(begun, inserted, &counts, effect)? {
                    Some(step) => Ok(step),
                    None => match committed {
                        Ok(_) => Ok(Step::Committed),
                        Err(e) => classify(&e, Some(counts.len().saturating_sub(1))),
                    },
                }
            })
            .collect()
    }

    /// Duplicate or conflict, for the jobs (`which`) whose marker refused
    /// the commit: their stored rows read in one statement, as the
    /// look-up before the handlers reads them.
    async fn compare_existing(
        &self,
        jobs: &[(JobRef<'_>, &Effect)],
        which: &[usize],
    ) -> Vec<Answer> {
        let refs: Vec<JobRef<'_>> = which.iter().map(|&i| jobs[i].0).collect();
        self.look_up(&refs)
            .await
            .into_iter()
            .map(|found| match found? {
                LookedUp::Settled(settled) => Ok(settled),
                // Refused by its marker, then gone: expired and swept
                // meanwhile.
                _ => Ok(Settled::new(CommitOutcome::Transient {
                    reason: "the job's marker refused the commit, then was gone (expired and swept meanwhile)".into(),
                })),
            })
            .collect()
    }
}

/// At most this many connections carry one batch's pipelines.
///
/// One connection makes the server run the batch's transactions one after
/// another; a plain consumer's connections run them side by side. Spread
/// over two connections, the batch's commits still take one round trip of
/// wall time and the server works on them in parallel: on loopback a batch
/// of 10 commits about 1.7× as fast as on one connection, and a third
/// connection measured no faster (`make bench-postgres`, BENCHMARKS.md).
const PIPELINES: usize = 2;

/// Jobs per pipeline at the least: a batch of fewer than twice this many
/// takes one connection, since a second would cost the server a session's
/// work for what one or two more transactions in the first one cost.
const MIN_PER_PIPELINE: usize = 3;

/// How many pipelines carry `jobs` jobs.
fn pipelines(jobs: usize) -> usize {
    (jobs / MIN_PER_PIPELINE).clamp(1, PIPELINES)
}

/// One answer of a failure that many jobs share.
fn shared(failure: &Result<CommitOutcome, CommitError>) -> Answer {
    match failure {
        Ok(outcome) => Ok(Settled::new(outcome.clone())),
        Err(e) => Err(e.shared()),
    }
}

/// Puts the answers of the jobs at `which` in their places.
fn place(answers: &mut [Option<Answer>], which: Vec<usize>, got: Vec<Answer>) {
    for (i, a) in which.into_iter().zip(got) {
        answers[i] = Some(a);
    }
}

#[cfg(test)]
mod tests {
    use super::pipelines;

    #[test]
    fn a_batch_takes_a_second_connection_only_when_each_gets_three_jobs() {
        let spread: Vec<usize> = (1..=11).map(pipelines).collect();
        assert_eq!(spread, [1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2]);
        assert_eq!(pipelines(100), 2);
    }
}
