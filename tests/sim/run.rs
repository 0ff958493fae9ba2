//! One run of one seed: the world set up, producers, Lambda environments and
//! an operator let loose for the simulated hours, then the checker.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, UNIX_EPOCH};

use aws_sdk_dynamodb::types::AttributeValue;
use futures_util::future::join_all;
use idemq::batch::Processor;
use idemq::config::BatchConfig;
use idemq::dead_letter::DeadLetters;
use idemq::dlq::peek::Peek;
use idemq::dlq::redrive::{Redrive, RedriveOptions};
use idemq::effect::{Key, Write};
use idemq::handler::{JobError, JobMeta, handler_fn};
use idemq::producer::{Job, Producer};
use idemq::queue::QueueInfo;
use idemq::{Committer, Effect, JobIdResolver, TableLayout};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::World;
use super::check::{self, Event, Verdicts};
use super::faults::{Attempt, Faults, Rates};
use super::lambda::{self, Mapping};
use super::net::{self, Net};
use super::sqs::{self, Queue};

pub const SOURCE: &str = "sim-jobs";
pub const DLQ: &str = "sim-jobs-dlq";
pub const TABLE: &str = "sim";
const HOUR: Duration = Duration::from_secs(3600);

/// A run's shape, drawn from its seed.
#[derive(Debug, Clone)]
pub struct Config {
    pub seed: u64,
    pub hours: f64,
    pub jobs: usize,
    pub mapping: Mapping,
    pub visibility: Duration,
    pub retention: Duration,
    pub max_receive_count: u32,
    /// Share of jobs sent without `idemq-job-id` (their MessageId is their id).
    pub message_id_jobs: f64,
    /// Share of jobs with a stable id that the producer sends twice.
    pub duplicates: f64,
    pub poison: f64,
    pub garbage: f64,
    /// Share of jobs whose handler asks for a retry in 1 to 12 hours on
    /// their first three attempts.
    pub later: f64,
    pub redrive_every: Option<Duration>,
    pub rates: Rates,
    pub bursts: usize,
    pub tracing: bool,
}

impl Config {
    pub fn of_seed(seed: u64, hours: f64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let function_timeout = Duration::from_secs(rng.random_range(10..=60));
        // The templates require visibility >= 6 x function timeout.
        let visibility = function_timeout * rng.random_range(6..=8);
        let retention = [24, 24, 48, 96][rng.random_range(0..4)] as u64;
        Self {
            seed,
            hours,
            jobs: rng.random_range(200..=400),
            mapping: Mapping {
                batch_size: rng.random_range(1..=10),
                function_timeout,
                concurrency: rng.random_range(2..=5),
            },
            visibility,
            retention: Duration::from_secs(retention * 3600),
            max_receive_count: rng.random_range(2..=8),
            message_id_jobs: rng.random_range(0.0..0.4),
            duplicates: rng.random_range(0.0..0.2),
            poison: rng.random_range(0.0..0.05),
            garbage: rng.random_range(0.0..0.03),
            later: rng.random_range(0.0..0.08),
            redrive_every: rng
                .random_bool(0.8)
                .then(|| Duration::from_secs(rng.random_range(2 * 3600..8 * 3600))),
            rates: Rates::draw(&mut rng),
            bursts: rng.random_range(0..=3),
            tracing: false,
        }
    }
}

/// What a run did, for the figures and the verdict.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub config: Config,
    pub verdicts: Verdicts,
    pub counts: super::faults::Counts,
    pub invocations: u64,
    pub redrives: u64,
    /// Redrives stopped after 30 simulated minutes, still moving letters.
    pub redrives_overran: u64,
    /// A digest of the whole history: equal for equal runs.
    pub digest: u64,
    /// The history, one line per event.
    pub history: Vec<String>,
    /// The trace, when the config asked for it.
    pub trace: Vec<String>,
}

#[derive(serde::Deserialize)]
struct SimJob {
    k: String,
    kind: String,
    n: u64,
}

/// Panics the handler is told to throw are expected: keep them out of the
/// test output (the trace says where they happened).
fn quiet_simulated_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let simulated = info
                .payload()
                .downcast_ref::<&str>()
                .is_some_and(|s| s.starts_with("sim:"));
            if !simulated {
                default(info);
            }
        }));
    });
}

/// Runs `config` on a fresh paused current-thread runtime.
pub fn run(config: &Config) -> Outcome {
    quiet_simulated_panics();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    let out = rt.block_on(simulate(config.clone()));
    idemq::clock::real();
    out
}

async fn simulate(config: Config) -> Outcome {
    let epoch = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    idemq::clock::simulate(epoch, config.seed);
    // The SDK's retry jitter (fastrand, thread-local).
    fastrand::seed(config.seed);
    let mut rng = StdRng::seed_from_u64(config.seed ^ 0x5eed);
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(config.hours * 3600.0);
    // Long enough for any message left at `end` to be retried out, or to
    // reach its retention and be deleted by SQS.
    let drain_until = end + config.retention + 13 * HOUR;

    let mut faults = Faults::new(config.seed, config.rates);
    for _ in 0..config.bursts {
        let at = start + Duration::from_secs(rng.random_range(0..(config.hours * 3600.0) as u64));
        let len = Duration::from_secs(rng.random_range(60..900));
        faults.bursts.push((at, at + len));
    }
    let world = Arc::new(Mutex::new(World::new(faults, config.tracing)));
    {
        let mut w = world.lock().expect("world");
        let mut source = Queue::new(SOURCE, config.visibility, config.retention);
        source.redrive = Some((DLQ.into(), config.max_receive_count));
        w.sqs.add(source);
        // A DLQ keeps its letters 14 days, the most SQS allows.
        w.sqs
            .add(Queue::new(DLQ, Duration::from_secs(30), 14 * 24 * HOUR));
        w.ddb.add_table(TABLE, "pk", Some("expires_at"));
    }
    let net = Net {
        world: Arc::clone(&world),
    };
    let (sqs_client, ddb) = net::clients(&net, config.seed);
    let queue = QueueInfo::discover(&sqs_client, &sqs::url(SOURCE))
        .await
        .expect("the source queue");
    let producer = Producer::with_client(sqs_client.clone(), sqs::url(SOURCE))
        .await
        .expect("producer");
    world.lock().expect("world").faults.enabled = true;

    let layout = TableLayout::new(TABLE);
    let ttl = idemq::config::DEFAULT_MARKER_TTL;
    let dead_letters = DeadLetters::new(ddb.clone(), sqs_client.clone(), layout.clone(), ttl);
    let handler_world = Arc::clone(&world);
    let handler = handler_fn(move |job: SimJob, meta: JobMeta| {
        let world = Arc::clone(&handler_world);
        async move { handle(&world, job, meta).await }
    });
    let processor = Processor::new(
        handler,
        Committer::new(ddb.clone(), layout.clone(), ttl),
        dead_letters.clone(),
        sqs_client.clone(),
        JobIdResolver::new(),
        BatchConfig::default(),
    );

    let schedule = schedule(&config, &mut rng);
    let invocations = Mutex::new(0u64);
    let operator_counts = Mutex::new((0u64, 0u64));
    let envs = (0..config.mapping.concurrency).map(|_| {
        lambda::environment(
            &world,
            &processor,
            &queue,
            config.mapping,
            (end, drain_until),
            &invocations,
        )
    });
    let produce = produce(&world, &producer, schedule);
    let operate = operate(
        &world,
        &sqs_client,
        &dead_letters,
        &config,
        end,
        &operator_counts,
        &mut rng,
    );
    tokio::join!(join_all(envs), produce, operate);

    let mut w = world.lock().expect("world");
    let w = &mut *w;
    w.sqs.expire(idemq::clock::now(), &mut w.history);
    let dlq_final: Vec<(String, Value, String)> = w.sqs.queues[DLQ]
        .messages
        .values()
        .map(|m| {
            let id = m
                .attributes
                .get(idemq::JOB_ID_ATTRIBUTE)
                .and_then(|a| a["StringValue"].as_str())
                .unwrap_or(&m.id);
            let attrs = serde_json::to_value(&m.attributes).expect("attributes");
            (
                m.body.clone(),
                attrs,
                format!("{}failure#{id}", layout.key_prefix),
            )
        })
        .collect();
    let verdicts = check::check(
        &w.history,
        SOURCE,
        DLQ,
        &dlq_final,
        &w.ddb.tables[TABLE].items,
    );
    let (redrives, redrives_overran) = *operator_counts.lock().expect("counts");
    let history: Vec<String> = w.history.events.iter().map(|e| format!("{e:?}")).collect();
    let digest_input = history.join("\n");
    Outcome {
        config,
        verdicts,
        counts: w.faults.counts,
        invocations: *invocations.lock().expect("invocations"),
        redrives,
        redrives_overran,
        digest: super::faults::hash(&[digest_input.as_bytes()]),
        history,
        trace: std::mem::take(&mut w.trace),
    }
}

/// The simulated handler: poison jobs fail permanently; "later" jobs ask
/// for a retry in 1 to 12 hours on their first three attempts; the rest fail, panic or
/// hang as the seed says, else add 1 to their own counter (`count#<k>`),
/// which is how the checker sees every application.
async fn handle(world: &Arc<Mutex<World>>, job: SimJob, meta: JobMeta) -> Result<Effect, JobError> {
    if job.kind == "poison" {
        return Err(JobError::permanent("sim: poison job"));
    }
    if job.kind == "later" && meta.attempt <= 3 {
        let after = HOUR * ((job.n + u64::from(meta.attempt)) % 12 + 1) as u32;
        return Err(JobError::retry_after("sim: rate limited", after));
    }
    let attempt =
        world
            .lock()
            .expect("world")
            .faults
            .attempt(&job.k, &meta.message_id, meta.attempt);
    match attempt {
        Attempt::Transient => Err(JobError::transient("sim: downstream unavailable")),
        Attempt::Panic => panic!("sim: handler panicked"),
        Attempt::Hang => {
            tokio::time::sleep(HOUR).await;
            Err(JobError::transient("sim: hung"))
        }
        Attempt::Ok(took) => {
            tokio::time::sleep(took).await;
            Ok(Effect::new().with(
                Write::update(
                    TABLE,
                    Key::string("pk", format!("count#{}", job.k)),
                    "ADD #n :one",
                )
                .name("#n", "n")
                .value(":one", AttributeValue::N("1".into())),
            ))
        }
    }
}

/// A send: when, which job, and whether with `idemq-job-id`.
struct Send {
    at: Duration,
    body: String,
    k: String,
    stable: bool,
}

fn schedule(config: &Config, rng: &mut StdRng) -> Vec<Send> {
    let window = config.hours * 3600.0 * 0.75;
    let mut sends = Vec::new();
    for i in 0..config.jobs {
        let k = format!("j{i:04}");
        let roll: f64 = rng.random();
        let kind = if roll < config.poison {
            "poison"
        } else if roll < config.poison + config.garbage {
            "garbage"
        } else if roll < config.poison + config.garbage + config.later {
            "later"
        } else {
            "plain"
        };
        let n: u64 = rng.random_range(0..1000);
        let body = if kind == "garbage" {
            json!({"k": k, "kind": kind, "n": "not a number"})
        } else {
            json!({"k": k, "kind": kind, "n": n})
        }
        .to_string();
        let at = Duration::from_secs_f64(rng.random_range(0.0..window));
        let stable = !rng.random_bool(config.message_id_jobs);
        if stable && rng.random_bool(config.duplicates) {
            let again = at + Duration::from_secs(rng.random_range(1..7200));
            sends.push(Send {
                at: again,
                body: body.clone(),
                k: k.clone(),
                stable,
            });
        }
        sends.push(Send {
            at,
            body,
            k,
            stable,
        });
    }
    sends.sort_by_key(|s| (s.at, s.k.clone()));
    sends
}

/// The producers: jobs with a stable id through idemq's `Producer` (over
/// the faulty network: a send whose answer is lost is retried, and may
/// leave two copies, which is what producers do); jobs known by their
/// MessageId straight onto the queue, once each (a producer that sends
/// such a job twice makes two jobs, which idemq does not promise to merge).
async fn produce(world: &Arc<Mutex<World>>, producer: &Producer, sends: Vec<Send>) {
    let start = world.lock().expect("world").started;
    for s in sends {
        tokio::time::sleep_until(start + s.at).await;
        if s.stable {
            let job = Job::raw(s.k.clone(), s.body);
            if let Err(e) = producer.send_job(job).await {
                world
                    .lock()
                    .expect("world")
                    .trace(format!("producer: {} not sent: {e}", s.k));
            }
        } else {
            let mut w = world.lock().expect("world");
            let w = &mut *w;
            let id = w.sqs.enqueue(
                SOURCE,
                s.body.clone(),
                BTreeMap::new(),
                idemq::clock::now(),
                Duration::ZERO,
            );
            w.history.push(Event::Sent {
                queue: SOURCE.into(),
                message_id: id,
                body: s.body,
            });
            w.changed.notify_waiters();
        }
    }
}

/// `SIM_REDRIVE_MAX=1`: the operator runs redrive with `--max` the depth it
/// saw first. By default it runs it as most operators do, unbounded: a run
/// moves each job at most once, so it ends even while the letters it moved
/// die again (before that rule, seed 7 moved one job 1,391 times in one run).
fn bounded_redrive() -> bool {
    std::env::var("SIM_REDRIVE_MAX").is_ok_and(|v| v == "1")
}

/// The operator: `idemq dlq redrive`'s own code every few hours, sometimes
/// killed part way (its future dropped).
async fn operate(
    world: &Arc<Mutex<World>>,
    sqs_client: &aws_sdk_sqs::Client,
    dead_letters: &DeadLetters,
    config: &Config,
    end: Instant,
    // (redrives run, redrives stopped while still moving letters)
    counts: &Mutex<(u64, u64)>,
    rng: &mut StdRng,
) {
    let Some(every) = config.redrive_every else {
        return;
    };
    // The last redrive leaves time for what it moved to be processed.
    let last = end
        .checked_sub(Duration::from_secs_f64(config.hours * 3600.0 * 0.15))
        .unwrap_or(end);
    loop {
        tokio::time::sleep(every).await;
        if Instant::now() >= last {
            return;
        }
        counts.lock().expect("counts").0 += 1;
        let killed_after = rng
            .random_bool(0.3)
            .then(|| Duration::from_millis(rng.random_range(0..20_000)));
        let peek = Peek::new(sqs_client.clone(), sqs::url(DLQ), Duration::from_secs(600));
        let work = async {
            let max = if bounded_redrive() {
                Some(peek.depth().await?.total() as usize)
            } else {
                None
            };
            let options = RedriveOptions {
                max,
                ..RedriveOptions::default()
            };
            let redrive = Redrive::new(&peek, Some(dead_letters), options).await?;
            redrive.run(&|_, _| {}).await
        };
        // A kill, or an operator who gives up after half an hour.
        let after = killed_after.unwrap_or(Duration::from_secs(1800));
        let result = tokio::time::timeout(after, work).await.ok();
        let line = match result {
            None if killed_after.is_none() => {
                counts.lock().expect("counts").1 += 1;
                "operator: redrive still running after 30 min: stopped".to_owned()
            }
            None => "operator: redrive killed".to_owned(),
            Some(Ok(r)) => format!(
                "operator: redrive moved {}, failed {}, sent-not-deleted {}",
                r.moved.len(),
                r.failed.len(),
                r.sent_not_deleted.len()
            ),
            Some(Err(e)) => format!("operator: redrive failed: {e}"),
        };
        world.lock().expect("world").trace(line);
    }
}
