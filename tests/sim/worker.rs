//! Local worker hosts in place of Lambda: idemq's own worker loop
//! (`worker::serve_until`, src/worker.rs: what `idemq::run` runs when
//! `AWS_LAMBDA_RUNTIME_API` is not set, without its signal watch) over the
//! simulated clients. It long-polls `ReceiveMessage` (20 s, or
//! less near its idle limit), runs each batch through the processor with
//! the queue's visibility timeout as the deadline, and deletes what is
//! done with `DeleteMessageBatch`; nothing answers for it as the event
//! source mapping answers for a function.
//!
//! A worker process dies at an await point drawn from the seed (its
//! future dropped: batches in hand stay in flight until their visibility
//! runs out, deletes not sent are never sent), and is restarted after a
//! pause; a live one exits after 10 idle minutes (`--exit-when-idle`) and
//! is started again while the run lasts, so start-up (`discover`) runs
//! many times too.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idemq::Handler;
use idemq::Host;
use idemq::worker::{WorkerArgs, serve_until};
use tokio::time::Instant;

use super::World;

/// Idle minutes before a live worker exits (and is started again).
const IDLE_EXIT: Duration = Duration::from_secs(600);

/// Worker process `index` of the run, started again and again until the
/// load has ended and the source queue is empty, or `drain_until`.
pub async fn process<H: Handler>(
    world: &Arc<Mutex<World>>,
    host: &Host<H>,
    (queue_url, queue): (&str, &str),
    index: u64,
    (end, drain_until): (Instant, Instant),
    lives: &Mutex<u64>,
) {
    let mut args = WorkerArgs::new(queue_url);
    args.exit_when_idle = Some(IDLE_EXIT.as_secs());
    loop {
        let now = Instant::now();
        let empty = world.lock().expect("world").sqs.queues[queue]
            .messages
            .is_empty();
        if now >= drain_until || (now >= end && empty) {
            return;
        }
        let life = {
            let mut n = lives.lock().expect("lives");
            *n += 1;
            *n
        };
        let fate = world.lock().expect("world").faults.worker_life(life);
        // No signal comes: a process ends by being killed or idle.
        let run = serve_until(host, &args, std::future::pending());
        match fate {
            Some((after, restart)) => {
                if tokio::time::timeout(after, run).await.is_err() {
                    world.lock().expect("world").trace(format!(
                        "worker {index}: process killed after {:.1} s",
                        after.as_secs_f64()
                    ));
                    tokio::time::sleep(restart).await;
                }
            }
            None => {
                if let Err(e) = run.await {
                    world
                        .lock()
                        .expect("world")
                        .trace(format!("worker {index}: exited: {e}"));
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
            }
        }
    }
}
