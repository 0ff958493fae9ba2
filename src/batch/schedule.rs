//! Running a batch's jobs: FIFO groups in order, at most `IDEMQ_CONCURRENCY`
//! at once, none started too close to the deadline; and the partial batch
//! response the verdicts make.

use super::*;

/// Runs `run` over a batch and returns each message's verdict (in batch
/// order) and, if it ran, how long it took. FIFO messages form ordered
/// groups that stop at their first failure; other messages are groups of
/// one; up to `concurrency` groups run at once; no job starts within
/// `deadline_margin` of the deadline.
pub(crate) async fn schedule<'m, F, Fut>(
    messages: &'m [Message],
    deadline: Instant,
    config: &BatchConfig,
    run: F,
) -> Vec<(Verdict, Option<Duration>)>
where
    F: Fn(usize, &'m Message) -> Fut,
    Fut: std::future::Future<Output = Verdict>,
{
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut group_of: HashMap<&str, usize> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        match m.group_id.as_deref() {
            Some(g) => {
                let at = *group_of.entry(g).or_insert_with(|| {
                    groups.push(Vec::new());
                    groups.len() - 1
                });
                groups[at].push(i);
            }
            None => groups.push(vec![i]),
        }
    }
    let run = &run;
    let results: Vec<Vec<(usize, Verdict, Option<Duration>)>> = stream::iter(groups)
        .map(|group| async move {
            let mut out = Vec::with_capacity(group.len());
            let mut blocked = false;
            for i in group {
                let msg = &messages[i];
                if blocked {
                    let why = "an earlier message of its FIFO group failed";
                    out.push((i, Verdict::NotAttempted { why }, None));
                    continue;
                }
                if Instant::now() >= Budget::new(deadline, config.deadline_margin).start_by {
                    let why = "too close to the deadline to start";
                    out.push((i, Verdict::NotAttempted { why }, None));
                    continue;
                }
                // The chaos suite dies here: in the middle of a batch.
                #[cfg(feature = "failpoints")]
                fail::fail_point!("batch::before-job", |_| -> Vec<(
                    usize,
                    Verdict,
                    Option<Duration>
                )> {
                    std::process::abort()
                });
                let start = Instant::now();
                let verdict = run(i, msg).await;
                blocked = msg.group_id.is_some() && verdict.stays_on_queue();
                out.push((i, verdict, Some(start.elapsed())));
            }
            out
        })
        .buffer_unordered(config.concurrency.max(1))
        .collect()
        .await;
    let mut verdicts: Vec<Option<(Verdict, Option<Duration>)>> = vec![None; messages.len()];
    for (i, v, took) in results.into_iter().flatten() {
        verdicts[i] = Some((v, took));
    }
    verdicts
        .into_iter()
        .map(|v| v.expect("every message has a verdict"))
        .collect()
}

/// The partial batch response: the ids of messages whose verdict leaves
/// them on the queue, each once, in batch order.
pub(crate) fn failed_ids<'a>(
    verdicts: impl IntoIterator<Item = (&'a Message, &'a Verdict)>,
) -> Vec<String> {
    let mut seen = HashSet::new();
    verdicts
        .into_iter()
        .filter(|(m, v)| v.stays_on_queue() && seen.insert(m.message_id.as_str()))
        .map(|(m, _)| m.message_id.clone())
        .collect()
}
