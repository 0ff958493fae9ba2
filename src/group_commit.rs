//! Group commit: the commits of a batch's jobs whose handlers finish
//! together, handed to the store at once ([`Store::commit_batch`]), for a
//! store that answers many in fewer round trips than one each
//! ([`Store::groups_commits`]; PostgreSQL pipelines them on one or two
//! connections).
//!
//! A job that reaches its commit waits here until no other running job is
//! still in its handler (each will commit or end soon), or until a short
//! window passes (a slow handler does not hold the others back longer),
//! and then one of the waiting jobs commits all that are waiting. Jobs
//! still queued behind the batch's concurrency limit, or behind an earlier
//! message of their FIFO group, have not started and are not waited for.
//!
//! Only latency depends on this bookkeeping, never an outcome: each job's
//! commit is still its own transaction, and a job whose wait is cut short
//! (its deadline) gives up its place like any commit abandoned in flight,
//! the marker settling it on its next delivery.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::commit::{CommitError, CommitOutcome, JobRef};
use crate::store::{Settled, Store};

/// How long a job that reached its commit waits for the batch's other
/// running jobs before it commits what is waiting: about a round trip to
/// a database in the same region, so a slow handler costs the others at
/// most what the gathering saves.
pub(crate) const WINDOW: Duration = Duration::from_millis(2);

/// What a waiting job gets back: its commit's result and its effect (the
/// batch still sends the effect's follow-ups), which is gone only when the
/// job that took the commit was cut short before answering.
pub(crate) type Reply<E> = (Result<Settled, CommitError>, Option<E>);

/// The commits of one batch.
pub(crate) struct GroupCommit<'b, E> {
    store: &'b dyn Store<Effect = E>,
    gathers: bool,
    state: Mutex<State<'b, E>>,
}

struct State<'b, E> {
    /// Jobs in their handlers: started and neither waiting here nor done.
    running: usize,
    /// How many jobs have come to wait so far (to tell whether more came).
    arrivals: u64,
    waiting: Vec<Waiter<'b, E>>,
}

struct Waiter<'b, E> {
    /// Its place in arrival order (`State::arrivals` when it came).
    id: u64,
    job: JobRef<'b>,
    effect: E,
    reply: oneshot::Sender<Reply<E>>,
}

/// A job's place in the bookkeeping, from [`GroupCommit::enter`] until it
/// is dropped: counted as running except while it waits at the gate.
pub(crate) struct Running<'g, 'b, E> {
    gate: &'g GroupCommit<'b, E>,
    counted: AtomicBool,
}

impl<E> Drop for Running<'_, '_, E> {
    fn drop(&mut self) {
        if self.counted.load(Ordering::Relaxed) {
            self.gate.lock().running -= 1;
        }
    }
}

impl<'b, E> GroupCommit<'b, E> {
    fn lock(&self) -> std::sync::MutexGuard<'_, State<'b, E>> {
        // Never held across an await, and no code under it panics.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<'b, E: Send + Sync + 'static> GroupCommit<'b, E> {
    pub(crate) fn new(store: &'b dyn Store<Effect = E>) -> Self {
        Self {
            gathers: store.groups_commits(),
            store,
            state: Mutex::new(State {
                running: 0,
                arrivals: 0,
                waiting: Vec::new(),
            }),
        }
    }

    /// A job starts: it may come to commit.
    pub(crate) fn enter(&self) -> Running<'_, 'b, E> {
        self.lock().running += 1;
        Running {
            gate: self,
            counted: AtomicBool::new(true),
        }
    }

    /// A job is done with committing (it committed, or will not): if the
    /// jobs waiting were waiting for it, they commit now.
    pub(crate) async fn leave(&self, running: Running<'_, 'b, E>) {
        drop(running);
        if !self.gathers {
            return;
        }
        let due = {
            let mut s = self.lock();
            if s.running == 0 {
                std::mem::take(&mut s.waiting)
            } else {
                Vec::new()
            }
        };
        self.flush(due).await;
    }

    /// Commits `effect` for `job`, gathered with the batch's other commits
    /// where the store gains from that; returns the effect with the result.
    pub(crate) async fn commit(
        &self,
        running: &Running<'_, 'b, E>,
        job: JobRef<'b>,
        effect: E,
    ) -> Reply<E> {
        if !self.gathers {
            let settled = self.store.commit(job, &effect).await;
            return (settled, Some(effect));
        }
        let (reply, mut answer) = oneshot::channel();
        let id = {
            let mut s = self.lock();
            let id = s.arrivals;
            s.waiting.push(Waiter {
                id,
                job,
                effect,
                reply,
            });
            s.arrivals += 1;
            s.running -= 1;
            id
        };
        running.counted.store(false, Ordering::Relaxed);
        let got = self.wait(id, &mut answer).await;
        self.lock().running += 1;
        running.counted.store(true, Ordering::Relaxed);
        got
    }

    /// Waits for job `id`'s answer, committing what is waiting when no job
    /// is left running (and no other came in the last turn of the
    /// scheduler), or when the window has passed.
    async fn wait(&self, id: u64, answer: &mut oneshot::Receiver<Reply<E>>) -> Reply<E> {
        let mut seen = None;
        let until = tokio::time::Instant::now() + WINDOW;
        loop {
            let (due, mine_taken, running) = {
                let mut s = self.lock();
                let mine_taken = !s.waiting.iter().any(|w| w.id == id);
                let quiet = s.running == 0 && seen == Some(s.arrivals);
                seen = Some(s.arrivals);
                let due = if !mine_taken && (quiet || tokio::time::Instant::now() >= until) {
                    std::mem::take(&mut s.waiting)
                } else {
                    Vec::new()
                };
                (due, mine_taken, s.running)
            };
            if !due.is_empty() {
                self.flush(due).await;
            }
            if mine_taken {
                return answer.await.unwrap_or_else(|_| abandoned());
            }
            if let Ok(reply) = answer.try_recv() {
                return reply;
            }
            if running == 0 {
                // Let the jobs polled after this one reach their commit
                // first: one turn of the scheduler.
                tokio::task::yield_now().await;
            } else if let Ok(got) = tokio::time::timeout_at(until, &mut *answer).await {
                return got.unwrap_or_else(|_| abandoned());
            }
        }
    }

    /// Commits `due` in one call of the store and answers each job.
    async fn flush(&self, due: Vec<Waiter<'b, E>>) {
        if due.is_empty() {
            return;
        }
        let jobs: Vec<(JobRef<'b>, &E)> = due.iter().map(|w| (w.job, &w.effect)).collect();
        let mut results = self.store.commit_batch(&jobs).await.into_iter();
        drop(jobs);
        for w in due {
            let result = results.next().unwrap_or_else(|| {
                Err(CommitError::Service(
                    "the store answered fewer commits than it was given".into(),
                ))
            });
            // A job whose wait was cut short is gone: its result with it.
            let _ = w.reply.send((result, Some(w.effect)));
        }
    }
}

/// The answer of a job whose commit was taken by another job that was
/// then cut short (its deadline) before answering: unknown, so transient;
/// its marker settles it on its next delivery.
fn abandoned<E>() -> Reply<E> {
    let reason = "its commit went with the batch's other commits, and the job that sent them was cut short by the deadline before the answer";
    (
        Ok(Settled::new(CommitOutcome::Transient {
            reason: reason.into(),
        })),
        None,
    )
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;
    use futures_util::future::BoxFuture;

    use super::*;
    use crate::failure::{DlqError, FailureRecord};
    use crate::followup::FollowUp;
    use crate::job::{JobId, PayloadHash};

    /// A store that commits everything and keeps the size of each
    /// `commit_batch` call.
    #[derive(Default)]
    struct Counting {
        calls: Mutex<Vec<usize>>,
        gathers: bool,
    }

    impl Store for Counting {
        type Effect = u32;
        fn follow_ups<'e>(&self, _: &'e u32) -> &'e [FollowUp] {
            &[]
        }
        fn namespace_for<'a>(&'a self, queue: &'a str) -> &'a str {
            queue
        }
        fn looks_up(&self) -> bool {
            false
        }
        fn look_up<'a>(
            &'a self,
            jobs: &'a [JobRef<'a>],
        ) -> BoxFuture<'a, Vec<Result<crate::store::LookedUp, CommitError>>> {
            Box::pin(async move {
                jobs.iter()
                    .map(|_| Ok(crate::store::LookedUp::Absent))
                    .collect()
            })
        }
        fn commit<'a>(
            &'a self,
            _: JobRef<'a>,
            _: &'a u32,
        ) -> BoxFuture<'a, Result<Settled, CommitError>> {
            self.calls.lock().unwrap().push(1);
            Box::pin(async { Ok(Settled::new(CommitOutcome::Committed)) })
        }
        fn commit_batch<'a>(
            &'a self,
            jobs: &'a [(JobRef<'a>, &'a u32)],
        ) -> BoxFuture<'a, Vec<Result<Settled, CommitError>>> {
            self.calls.lock().unwrap().push(jobs.len());
            Box::pin(async move {
                tokio::task::yield_now().await;
                jobs.iter()
                    .map(|_| Ok(Settled::new(CommitOutcome::Committed)))
                    .collect()
            })
        }
        fn groups_commits(&self) -> bool {
            self.gathers
        }
        fn read_marker<'a>(
            &'a self,
            _: &'a str,
            _: &'a JobId,
        ) -> BoxFuture<'a, Result<Option<crate::commit::Marker>, CommitError>> {
            Box::pin(async { Ok(None) })
        }
        fn record_failure<'a>(
            &'a self,
            _: &'a FailureRecord,
        ) -> BoxFuture<'a, Result<(), DlqError>> {
            Box::pin(async { Ok(()) })
        }
        fn marker_ttl(&self) -> Duration {
            Duration::from_secs(86_400)
        }
    }

    /// Runs `n` jobs, at most `concurrency` at once, through one gate; job
    /// `i` "handles" for `handle(i)` before it commits. The calls the store
    /// saw, and every job's effect back.
    async fn run(
        store: &Counting,
        n: u32,
        concurrency: usize,
        handle: impl Fn(u32) -> Duration,
    ) -> (Vec<usize>, Vec<Option<u32>>) {
        let ids: Vec<JobId> = (0..n)
            .map(|i| JobId::new(format!("j{i}")).unwrap())
            .collect();
        let hash = PayloadHash::of(b"{}");
        let gate = GroupCommit::new(store);
        let gate = &gate;
        let handle = &handle;
        let effects: Vec<Option<u32>> = futures_util::stream::iter(0..n)
            .map(|i| {
                let job = JobRef {
                    id: &ids[i as usize],
                    payload_hash: &hash,
                    queue: "q",
                };
                async move {
                    let running = gate.enter();
                    let wait = handle(i);
                    if !wait.is_zero() {
                        tokio::time::sleep(wait).await;
                    }
                    let (settled, effect) = gate.commit(&running, job, i).await;
                    assert_eq!(settled.unwrap().outcome, CommitOutcome::Committed);
                    gate.leave(running).await;
                    effect
                }
            })
            .buffered(concurrency)
            .collect()
            .await;
        (std::mem::take(&mut *store.calls.lock().unwrap()), effects)
    }

    #[tokio::test]
    async fn jobs_that_finish_together_commit_in_one_call() {
        let store = Counting {
            gathers: true,
            ..Counting::default()
        };
        let (calls, effects) = run(&store, 10, 10, |_| Duration::ZERO).await;
        assert_eq!(calls, [10]);
        assert_eq!(
            effects,
            (0..10).map(Some).collect::<Vec<_>>(),
            "each job's effect back"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_handler_holds_the_others_for_the_window_at_most() {
        let store = Counting {
            gathers: true,
            ..Counting::default()
        };
        let start = tokio::time::Instant::now();
        let (calls, _) = run(&store, 10, 10, |i| {
            if i == 9 {
                Duration::from_secs(1)
            } else {
                Duration::ZERO
            }
        })
        .await;
        assert_eq!(
            calls,
            [9, 1],
            "the nine went after the window, the slow one alone"
        );
        assert!(start.elapsed() < Duration::from_secs(1) + WINDOW * 2);
    }

    #[tokio::test]
    async fn jobs_behind_the_concurrency_limit_are_not_waited_for() {
        let store = Counting {
            gathers: true,
            ..Counting::default()
        };
        let (calls, _) = run(&store, 10, 4, |_| Duration::ZERO).await;
        assert_eq!(calls.iter().sum::<usize>(), 10, "{calls:?}");
        assert!(calls.iter().all(|&c| c <= 4), "{calls:?}");
    }

    #[tokio::test]
    async fn a_store_that_does_not_gather_commits_each_job_at_once() {
        let store = Counting::default();
        let (calls, _) = run(&store, 5, 5, |_| Duration::ZERO).await;
        assert_eq!(calls, [1, 1, 1, 1, 1]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_job_that_commits_nothing_releases_the_ones_waiting_for_it() {
        let store = Counting {
            gathers: true,
            ..Counting::default()
        };
        let ids: Vec<JobId> = (0..3)
            .map(|i| JobId::new(format!("j{i}")).unwrap())
            .collect();
        let hash = PayloadHash::of(b"{}");
        let gate = GroupCommit::new(&store);
        let gate = &gate;
        let start = tokio::time::Instant::now();
        let jobs = (0..3).map(|i| {
            let job = JobRef {
                id: &ids[i],
                payload_hash: &hash,
                queue: "q",
            };
            async move {
                let running = gate.enter();
                if i == 2 {
                    // Fails in its handler after a while: never commits.
                    tokio::time::sleep(Duration::from_micros(500)).await;
                    gate.leave(running).await;
                    return;
                }
                let _ = gate.commit(&running, job, i as u32).await;
                gate.leave(running).await;
            }
        });
        futures_util::future::join_all(jobs).await;
        assert_eq!(*store.calls.lock().unwrap(), [2]);
        assert!(
            start.elapsed() < WINDOW,
            "released when the third job left, not by the window"
        );
    }
}
