//! The commit race: `TASKS` concurrent tasks each commit the same `JOBS` job
//! ids, each task walking them from a different offset so that tasks
//! collide on the same job at the same time throughout the run. Shared by
//! the transaction path (tests/local_stack.rs) and the fused-marker and
//! single-write paths (tests/commit_paths.rs).

use std::future::Future;
use std::sync::Arc;

use idemq::store::CommitOutcome;

pub const TASKS: usize = 8;
pub const JOBS: usize = 200;

/// The id of job `k` of the race.
pub fn job_id(k: usize) -> String {
    format!("race-{k}")
}

/// Runs the race with `commit(job_id)` committing one job (retried while
/// transient) and asserts that exactly one commit per job succeeded and
/// every other was a duplicate. What each job's effect left behind is for
/// the caller to check.
pub async fn race<F, Fut>(commit: F)
where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = CommitOutcome> + Send,
{
    let commit = Arc::new(commit);
    let mut handles = Vec::new();
    for task in 0..TASKS {
        let commit = Arc::clone(&commit);
        handles.push(tokio::spawn(async move {
            let (mut committed, mut duplicate) = (0, 0);
            for k in 0..JOBS {
                let id = job_id((k + task * JOBS / TASKS) % JOBS);
                loop {
                    match commit(id.clone()).await {
                        CommitOutcome::Committed => committed += 1,
                        CommitOutcome::Duplicate => duplicate += 1,
                        CommitOutcome::Transient { .. } => continue,
                        other => panic!("{id}: {other:?}"),
                    }
                    break;
                }
            }
            (committed, duplicate)
        }));
    }
    let (mut committed, mut duplicate) = (0, 0);
    for h in handles {
        let (c, d) = h.await.unwrap();
        committed += c;
        duplicate += d;
    }
    assert_eq!(committed, JOBS, "exactly one commit per job");
    assert_eq!(duplicate, JOBS * (TASKS - 1));
}
