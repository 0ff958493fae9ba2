//! One run of one seed: the world set up, producers, Lambda environments and
//! an operator let loose for the simulated hours, then the checker.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, UNIX_EPOCH};

use aws_sdk_dynamodb::types::AttributeValue;
use futures_util::future::join_all;
use idemq::batch::Processor;
use idemq::config::BatchConfig;
use idemq::config::TableLayout;
use idemq::dlq::peek::Peek;
use idemq::dlq::redrive::{Redrive, RedriveOptions};
use idemq::job::JobIdResolver;
use idemq::producer::{Job, Producer};
use idemq::queue::QueueInfo;
use idemq::store::dynamodb::{Committer, Effect};
use idemq::store::dynamodb::{Key, Write};
use idemq::{JobError, JobMeta, handler_fn};
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
/// The queues of a FIFO run (a FIFO queue's name ends in `.fifo`, and its
/// DLQ is FIFO too: tests/sim/fifo.rs).
pub const FIFO_SOURCE: &str = "sim-jobs.fifo";
pub const FIFO_DLQ: &str = "sim-jobs-dlq.fifo";
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
    /// The edge scenarios (tests/simulation.rs `edge_*`), all off in the
    /// campaign's seeds, so a seed means the same run as before they came.
    pub edges: Edges,
    /// A FIFO source queue (and DLQ): off in [`Config::of_seed`]; the FIFO
    /// campaign's seeds are [`Config::fifo_of_seed`].
    pub fifo: Option<FifoRun>,
}

/// How a FIFO run sends.
#[derive(Debug, Clone, Copy)]
pub struct FifoRun {
    /// Jobs are spread over this many message groups.
    pub groups: usize,
    /// The source queue has `ContentBasedDeduplication` (jobs known by
    /// their MessageId are then sent without a deduplication id).
    pub content_based_deduplication: bool,
}

/// Shares of job kinds and settings that the edge tests turn on.
#[derive(Debug, Clone, Default)]
pub struct Edges {
    /// Jobs whose effect is a `Put` aimed at another job's items (edge 4).
    pub evil: f64,
    /// Permanent failures whose error carries characters SQS refuses, with
    /// a body that fits the DLQ only without its context (edge 7).
    pub ugly: f64,
    /// Permanent failures with a 600 KB error (edge 10).
    pub huge: f64,
    /// Share of stable jobs sent with 9 producer attributes (edge 8).
    pub many_attributes: f64,
    /// Share of MessageId jobs whose body carries `"pid"`, which the
    /// consumer resolves as their id with the pointer `/pid` (edge 5).
    pub pointer_jobs: f64,
    /// The table layout's key prefix (edge 5: not the default).
    pub key_prefix: Option<String>,
    /// The DLQ's `MaximumMessageSize` (edge 7).
    pub dlq_max_message_size: Option<usize>,
    /// Until then (from the start) the table's key attribute is `id`, not
    /// the `pk` idemq writes: a deploy problem, fixed then (edge 9).
    pub schema_fixed_after: Option<Duration>,
    /// After the run, read every dead letter's context through idemq's own
    /// lookup (edge 5).
    pub audit_dlq: bool,
    /// After the run, read the FIFO DLQ as `idemq dlq list` and a dry-run
    /// `idemq dlq redrive` read it (edge 6).
    pub fifo_audit: bool,
    /// The second send of a duplicated job comes this long after the
    /// first (default: 1 s to 2 h later).
    pub duplicate_gap: Option<Duration>,
    /// The operator runs `idemq dlq redrive --native` (SQS's move task)
    /// when every letter has a stable id, and idemq's redrive otherwise,
    /// as the CLI tells it to.
    pub native_redrive: bool,
    /// The operator passes `--force`: the move task runs even when
    /// letters are known only by their MessageId.
    pub force_native: bool,
    /// Every successful handler attempt takes this long (default: 5 to
    /// 800 ms, drawn per attempt): copies received together then commit
    /// together, and their transactions conflict.
    pub handler_time: Option<Duration>,
    /// Every job but follow-ups has this shape (tests/sim/shapes.rs):
    /// optimistic read-modify-writes of a shared counter, so their commits
    /// race, or parents of follow-ups.
    pub only_shape: Option<super::shapes::Only>,
    /// During DynamoDB's throttling bursts SQS refuses every request.
    pub sqs_outages: bool,
    /// Jobs are sent within this window from the start (default: the
    /// first three quarters of the run).
    pub send_window: Option<Duration>,
    /// Local worker processes (tests/sim/worker.rs) instead of Lambda's
    /// event source mapping; 0: Lambda.
    pub workers: u64,
    /// The markers' TTL (default 21 days): the consumer refuses jobs first
    /// enqueued that long ago. Failure records keep the default, so a
    /// letter left in the DLQ keeps its context.
    pub marker_ttl: Option<Duration>,
    /// What the operator's redrive leaves the copy to be processed in
    /// before its markers may expire (default one day): the replay
    /// horizon is the marker TTL less this.
    pub replay_margin: Option<Duration>,
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
            edges: Edges::default(),
            fifo: None,
        }
    }

    /// A FIFO run: the seed's run of [`Config::of_seed`], on FIFO queues,
    /// its FIFO settings drawn from another generator (so the standard
    /// run's draws stay as they were). Jobs that ask for a retry hours
    /// away are left out: each would hold its group for up to 36 hours.
    pub fn fifo_of_seed(seed: u64, hours: f64) -> Self {
        let mut c = Self::of_seed(seed, hours);
        let mut rng = StdRng::seed_from_u64(seed ^ 0xf1f0_f1f0);
        c.later = 0.0;
        c.fifo = Some(FifoRun {
            groups: rng.random_range(2..=24),
            content_based_deduplication: rng.random_bool(0.5),
        });
        c
    }

    /// The source queue's name.
    pub fn source(&self) -> &'static str {
        if self.fifo.is_some() {
            FIFO_SOURCE
        } else {
            SOURCE
        }
    }

    /// The DLQ's name.
    pub fn dlq(&self) -> &'static str {
        if self.fifo.is_some() { FIFO_DLQ } else { DLQ }
    }
}

/// What a run did, for the figures and the verdict.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub config: Config,
    pub verdicts: Verdicts,
    pub counts: super::faults::Counts,
    pub invocations: u64,
    /// Local worker processes started (tests/sim/worker.rs).
    pub worker_lives: u64,
    pub redrives: u64,
    /// Redrives stopped after 30 simulated minutes, still moving letters.
    pub redrives_overran: u64,
    /// A digest of the whole history: equal for equal runs.
    pub digest: u64,
    /// The history, one line per event.
    pub history: Vec<String>,
    /// The trace, when the config asked for it.
    pub trace: Vec<String>,
    /// Handler attempts per job.
    pub attempts: BTreeMap<String, u32>,
    /// Dead letters that redrive runs could not move (their `failed`).
    pub redrive_failed: u64,
    /// Transactions cancelled by `TransactionConflict` (or refused as in
    /// progress).
    pub conflicts: u64,
    /// Letters moved back by move tasks the operator started.
    pub native_moved: u64,
    /// Messages left in the DLQ at the end.
    pub dlq_left: usize,
    /// Copies of each job deleted from the DLQ (moved by a redrive).
    pub dlq_moves: BTreeMap<String, u32>,
    /// Keys of the table's items at the end.
    pub items: Vec<String>,
    /// With `edges.audit_dlq`: each final dead letter's job, whether it
    /// died by SQS's own redrive (no `idemq-error`), and whether idemq's
    /// lookup found its error.
    pub audit: Vec<(String, bool, bool)>,
    /// With `edges.fifo_audit`: what the FIFO DLQ held and what idemq's
    /// readers made of it.
    pub fifo_audit: Option<FifoAudit>,
    /// Handler runs beyond the first in one delivery: idemq running the
    /// job again after a lost race (`Contended`, `Collided`).
    pub reruns: u64,
    /// Eventually consistent reads that returned an older item.
    pub stale_reads: u64,
    /// Letters the operator's redrives left in the DLQ as past the replay
    /// horizon (distinct DLQ message ids).
    pub refused: usize,
    /// Of those, the ones no longer in the DLQ at the end.
    pub refused_gone: Vec<String>,
}

/// A FIFO DLQ read back by idemq (edge 6).
#[derive(Debug, Clone, Default)]
pub struct FifoAudit {
    /// Letters in the DLQ, by message group (the model's own count).
    pub letters: BTreeMap<String, usize>,
    /// Letters `Peek::scan` read, by group.
    pub read: BTreeMap<String, usize>,
    /// Messages the scan returned twice, or that are no letter of the DLQ.
    pub strays: usize,
    /// What the scan counted as unreadable (`Scan::unseen`).
    pub unseen: u64,
    /// A dry-run redrive's report: would move (or remove as a copy of a
    /// job it moves), skipped, unseen.
    pub redrive: (usize, usize, u64),
}

/// What the operator's redrives did: (redrives run, redrives stopped while
/// still moving letters, letters redrives could not move, letters move
/// tasks moved).
type OperatorCounts = (u64, u64, u64, u64);
/// DLQ message ids of letters redrives left as past the replay horizon.
type Refused = std::collections::BTreeSet<String>;

/// Handler runs per delivery (message id, receive count), to count the
/// re-runs after lost races.
#[derive(Debug, Default)]
struct Runs {
    per_delivery: BTreeMap<(String, u32), u32>,
    reruns: u64,
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
    super::run_paused(simulate(config.clone()))
}

async fn simulate(config: Config) -> Outcome {
    let epoch = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    idemq::testing::clock::simulate(epoch, config.seed);
    // The SDK's retry jitter (fastrand, thread-local).
    fastrand::seed(config.seed);
    let mut rng = StdRng::seed_from_u64(config.seed ^ 0x5eed);
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(config.hours * 3600.0);
    // Long enough for any message left at `end` to be retried out, or to
    // reach its retention and be deleted by SQS.
    let drain_until = end + config.retention + 13 * HOUR;

    let mut faults = Faults::new(config.seed, config.rates);
    faults.sqs_outages = config.edges.sqs_outages;
    for _ in 0..config.bursts {
        let at = start + Duration::from_secs(rng.random_range(0..(config.hours * 3600.0) as u64));
        let len = Duration::from_secs(rng.random_range(60..900));
        faults.bursts.push((at, at + len));
    }
    let world = Arc::new(Mutex::new(World::new(faults, config.tracing)));
    {
        let mut w = world.lock().expect("world");
        w.handler_time = config.edges.handler_time;
        let mut source = Queue::new(config.source(), config.visibility, config.retention);
        source.redrive = Some((config.dlq().into(), config.max_receive_count));
        if let (Some(run), Some(state)) = (config.fifo, source.fifo.as_mut()) {
            state.content_based_deduplication = run.content_based_deduplication;
        }
        w.sqs.add(source);
        // A DLQ keeps its letters 14 days, the most SQS allows.
        let mut dlq = Queue::new(config.dlq(), Duration::from_secs(30), 14 * 24 * HOUR);
        if let Some(max) = config.edges.dlq_max_message_size {
            dlq.max_message_size = max;
        }
        w.sqs.add(dlq);
        let key = if config.edges.schema_fixed_after.is_some() {
            "id"
        } else {
            "pk"
        };
        w.ddb.add_table(TABLE, key, Some("expires_at"));
        w.ddb.seed = config.seed;
    }
    let net = Net {
        world: Arc::clone(&world),
    };
    let (sqs_client, ddb) = net::clients(&net, config.seed);
    let queue = QueueInfo::discover(&sqs_client, &sqs::url(config.source()))
        .await
        .expect("the source queue");
    let producer = Producer::with_client(sqs_client.clone(), sqs::url(config.source()))
        .await
        .expect("producer");
    world.lock().expect("world").faults.enabled = true;

    let mut layout = TableLayout::new(TABLE);
    if let Some(prefix) = &config.edges.key_prefix {
        layout.key_prefix = prefix.clone();
    }
    let resolver = if config.edges.pointer_jobs > 0.0 {
        JobIdResolver::new().with_body_pointer("/pid")
    } else {
        JobIdResolver::new()
    };
    let ttl = config
        .edges
        .marker_ttl
        .unwrap_or(idemq::config::DEFAULT_MARKER_TTL);
    // As `idemq dlq` opens it: records are looked for in the namespaces of
    // the DLQ's source queues.
    let dead_letters = idemq::dlq::records::Records::new(std::sync::Arc::new(
        idemq::store::dynamodb::FailureTable::new(
            ddb.clone(),
            layout.clone(),
            idemq::config::DEFAULT_MARKER_TTL,
        ),
    ))
    .with_source_queues(&[config.source()]);
    let handler_world = Arc::clone(&world);
    let runs: Arc<Mutex<Runs>> = Arc::default();
    let handler_runs = Arc::clone(&runs);
    let handler_ddb = ddb.clone();
    let seed = config.seed;
    let only_shape = config.edges.only_shape;
    let handler = move || {
        let handler_world = Arc::clone(&handler_world);
        let handler_runs = Arc::clone(&handler_runs);
        let handler_ddb = handler_ddb.clone();
        handler_fn(move |job: SimJob, meta: JobMeta| {
            let world = Arc::clone(&handler_world);
            let runs = Arc::clone(&handler_runs);
            let ddb = handler_ddb.clone();
            async move {
                let shape = super::shapes::Shape::of(seed, &job.k, &job.kind, only_shape);
                handle(&world, (shape, &ddb, &runs), job, meta).await
            }
        })
    };
    // Local worker processes share one host (clients and processor): the
    // processes differ in their loops, which is what dies.
    let host = (config.edges.workers > 0).then(|| {
        let mut behaviour = idemq::config::IdempotencyConfig::default();
        behaviour.marker_ttl = ttl;
        behaviour.job_id = resolver.clone();
        idemq::Host::from_clients(
            handler(),
            sqs_client.clone(),
            ddb.clone(),
            layout.clone(),
            behaviour,
            BatchConfig::default(),
        )
    });
    // Failure records kept the default TTL, markers the run's.
    let store = idemq::store::dynamodb::DynamoDb::new(
        Committer::new(ddb.clone(), layout.clone(), ttl),
        idemq::store::dynamodb::FailureTable::new(
            ddb.clone(),
            layout.clone(),
            idemq::config::DEFAULT_MARKER_TTL,
        ),
    );
    let processor = Processor::new(
        handler(),
        Arc::new(store),
        sqs_client.clone(),
        resolver.clone(),
        BatchConfig::default(),
    )
    .with_marker_ttl(ttl);

    let schedule = schedule(&config, &mut rng);
    let invocations = Mutex::new(0u64);
    let operator_counts: Mutex<OperatorCounts> = Mutex::new((0, 0, 0, 0));
    let refused: Mutex<Refused> = Mutex::default();
    let worker_lives = Mutex::new(0u64);
    let source_url = sqs::url(config.source());
    let envs: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + '_>>> = match &host {
        None => (0..config.mapping.concurrency)
            .map(|_| {
                Box::pin(lambda::environment(
                    &world,
                    &processor,
                    &queue,
                    config.mapping,
                    (end, drain_until),
                    &invocations,
                )) as _
            })
            .collect(),
        Some(host) => (0..config.edges.workers)
            .map(|i| {
                Box::pin(super::worker::process(
                    &world,
                    host,
                    (&source_url, config.source()),
                    i,
                    (end, drain_until),
                    &worker_lives,
                )) as _
            })
            .collect(),
    };
    let produce = produce(&world, &producer, schedule, &config);
    let operate = operate(
        &world,
        &sqs_client,
        (&dead_letters, &resolver),
        &config,
        end,
        (&operator_counts, &refused),
        &mut rng,
    );
    let deploy = async {
        if let Some(after) = config.edges.schema_fixed_after {
            tokio::time::sleep(after).await;
            let mut w = world.lock().expect("world");
            w.ddb.tables.get_mut(TABLE).expect("table").key = "pk".into();
            w.trace("operator: table recreated with the key idemq writes".into());
        }
    };
    // Three futures at the top, as before the deploy came: tokio::join!
    // rotates which it polls first, so a fourth would reorder every run.
    let produce = async {
        tokio::join!(produce, deploy);
    };
    tokio::join!(join_all(envs), produce, operate);
    let audit = if config.edges.audit_dlq {
        world.lock().expect("world").faults.enabled = false;
        audit_dlq(&sqs_client, &dead_letters, &resolver, config.dlq()).await
    } else {
        Vec::new()
    };
    let fifo_audit = if config.edges.fifo_audit {
        world.lock().expect("world").faults.enabled = false;
        Some(audit_fifo_dlq(&world, &sqs_client, &dead_letters, &resolver, config.dlq()).await)
    } else {
        None
    };

    let mut w = world.lock().expect("world");
    let w = &mut *w;
    w.sqs.expire(idemq::testing::clock::now(), &mut w.history);
    let dlq_final: Vec<(String, Value, String)> = w.sqs.queues[config.dlq()]
        .messages
        .values()
        .map(|m| {
            // The id the simulation gave the job when it sent it: the
            // attribute, else the body's `pid` (edge 5), else the MessageId.
            let pid = serde_json::from_str::<Value>(&m.body)
                .ok()
                .and_then(|b| b["pid"].as_str().map(str::to_owned));
            let id = m
                .attributes
                .get(idemq::job::JOB_ID_ATTRIBUTE)
                .and_then(|a| a["StringValue"].as_str())
                .map(str::to_owned)
                .or(pid)
                .unwrap_or_else(|| m.id.clone());
            let attrs = serde_json::to_value(&m.attributes).expect("attributes");
            (
                m.body.clone(),
                attrs,
                layout.failure_key(layout.namespace_for(config.source()), Some(&id), &m.id),
            )
        })
        .collect();
    let mut verdicts = check::check(
        &w.history,
        config.source(),
        config.dlq(),
        &dlq_final,
        &w.ddb.tables[TABLE].items,
    );
    let left: std::collections::BTreeSet<String> = [config.source(), config.dlq()]
        .iter()
        .flat_map(|q| w.sqs.queues[*q].messages.values())
        .filter_map(|m| check::job_of(&m.body))
        .collect();
    let only_shape = config.edges.only_shape;
    let shape_of = |k: &str, kind: &str| super::shapes::Shape::of(config.seed, k, kind, only_shape);
    verdicts
        .violations
        .extend(check::check_shapes(&w.history, &shape_of, &left));
    let (redrives, redrives_overran, redrive_failed, native_moved) =
        *operator_counts.lock().expect("counts");
    let mut dlq_moves: BTreeMap<String, u32> = BTreeMap::new();
    for e in &w.history.events {
        if let Event::Deleted { queue, body, .. } = e
            && queue == config.dlq()
            && let Some(k) = check::job_of(body)
        {
            *dlq_moves.entry(k).or_default() += 1;
        }
    }
    let history: Vec<String> = w.history.events.iter().map(|e| format!("{e:?}")).collect();
    let digest_input = history.join("\n");
    let dlq_left = w.sqs.queues[config.dlq()].messages.len();
    let refused = refused.into_inner().expect("refused");
    let still: std::collections::BTreeSet<&String> = w.sqs.queues[config.dlq()]
        .messages
        .values()
        .map(|m| &m.id)
        .collect();
    let refused_gone = refused
        .iter()
        .filter(|id| !still.contains(id))
        .cloned()
        .collect();
    Outcome {
        config,
        verdicts,
        counts: w.faults.counts,
        invocations: *invocations.lock().expect("invocations"),
        worker_lives: *worker_lives.lock().expect("lives"),
        redrives,
        redrives_overran,
        digest: super::faults::hash(&[digest_input.as_bytes()]),
        history,
        trace: std::mem::take(&mut w.trace),
        attempts: std::mem::take(&mut w.attempts),
        redrive_failed,
        conflicts: w.ddb.conflicts,
        native_moved,
        dlq_left,
        dlq_moves,
        items: w.ddb.tables[TABLE].items.keys().cloned().collect(),
        audit,
        fifo_audit,
        reruns: runs.lock().expect("runs").reruns,
        stale_reads: w.ddb.stale_reads,
        refused: refused.len(),
        refused_gone,
    }
}

/// Edge 6: the FIFO DLQ read as `idemq dlq list` reads it (`Peek::scan`,
/// through `Dlq::read_letters` in src/dlq/inspect/), then as a dry-run `idemq dlq redrive`
/// (`Redrive::run`), against what the model holds.
async fn audit_fifo_dlq(
    world: &Arc<Mutex<World>>,
    sqs_client: &aws_sdk_sqs::Client,
    dead_letters: &idemq::dlq::records::Records,
    resolver: &JobIdResolver,
    dlq: &str,
) -> FifoAudit {
    let mut audit = FifoAudit::default();
    let ids: BTreeMap<String, String> = {
        let w = world.lock().expect("world");
        w.sqs.queues[dlq]
            .messages
            .values()
            .map(|m| (m.id.clone(), m.group.clone().unwrap_or_default()))
            .collect()
    };
    for g in ids.values() {
        *audit.letters.entry(g.clone()).or_default() += 1;
    }
    let peek = Peek::new(sqs_client.clone(), sqs::url(dlq), Duration::from_secs(600));
    let scan = peek.scan(None, |_| {}).await.expect("scan");
    let mut seen = std::collections::BTreeSet::new();
    for m in &scan.messages {
        match ids.get(&m.message_id) {
            Some(g) if seen.insert(m.message_id.clone()) => {
                *audit.read.entry(g.clone()).or_default() += 1;
            }
            _ => audit.strays += 1,
        }
    }
    audit.unseen = scan.unseen;
    peek.release(&scan.messages).await;
    let options = RedriveOptions {
        dry_run: true,
        resolver: resolver.clone(),
        ..RedriveOptions::default()
    };
    let redrive = Redrive::new(&peek, Some(dead_letters), options)
        .await
        .expect("redrive");
    let report = redrive.run(&|_, _| {}).await.expect("dry run");
    audit.redrive = (
        report.moved.len() + report.copies.len(),
        report.skipped,
        report.unseen,
    );
    audit
}

/// Every dead letter read back as `idemq dlq list` reads it (`Peek::scan`,
/// the id the consumer would resolve, failure records by that id):
/// (job, died by SQS's redrive, error found).
async fn audit_dlq(
    sqs_client: &aws_sdk_sqs::Client,
    dead_letters: &idemq::dlq::records::Records,
    resolver: &JobIdResolver,
    dlq: &str,
) -> Vec<(String, bool, bool)> {
    let peek = Peek::new(sqs_client.clone(), sqs::url(dlq), Duration::from_secs(600));
    let scan = peek.scan(None, |_| {}).await.expect("scan");
    let keys: Vec<(Option<String>, String)> = scan
        .messages
        .iter()
        .map(|m| m.record_key(resolver))
        .collect();
    let records = dead_letters.read_many(&keys).await.expect("records");
    scan.messages
        .iter()
        .zip(&keys)
        .map(|(m, key)| {
            let context = idemq::dlq::peek::Context::of(m, key.0.as_deref(), records.get(key));
            (
                check::job_of(&m.body).unwrap_or_default(),
                m.source_arn().is_some(),
                context.last_error.is_some(),
            )
        })
        .collect()
}

/// The simulated handler: poison jobs fail permanently; "later" jobs ask
/// for a retry in 1 to 12 hours on their first three attempts; the rest fail, panic or
/// hang as the seed says, else add 1 to their own counter (`count#<k>`),
/// which is how the checker sees every application, in the job's shape
/// (tests/sim/shapes.rs: marker separate or fused, one PutItem, a
/// follow-up job, an optimistic read-modify-write).
async fn handle(
    world: &Arc<Mutex<World>>,
    (shape, ddb, runs): (
        super::shapes::Shape,
        &aws_sdk_dynamodb::Client,
        &Mutex<Runs>,
    ),
    job: SimJob,
    meta: JobMeta,
) -> Result<Effect, JobError> {
    *world
        .lock()
        .expect("world")
        .attempts
        .entry(job.k.clone())
        .or_default() += 1;
    {
        let mut r = runs.lock().expect("runs");
        let n = r
            .per_delivery
            .entry((meta.message_id.clone(), meta.attempt))
            .or_default();
        *n += 1;
        if *n > 1 {
            r.reruns += 1;
        }
    }
    match job.kind.as_str() {
        "poison" => return Err(JobError::permanent("sim: poison job")),
        // U+0001 and U+FFFE: outside the characters SQS takes in an
        // attribute value.
        "ugly" => return Err(JobError::permanent("sim: ugly \u{1} \u{fffe} error")),
        "huge" => {
            return Err(JobError::permanent(format!(
                "sim: huge {}",
                "e".repeat(600_000)
            )));
        }
        "evil" => return Ok(evil_effect(&job)),
        _ => {}
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
            let took = world.lock().expect("world").handler_time.unwrap_or(took);
            // An optimistic job reads first: its work (`took`) is the window
            // in which another job may move the counter it read.
            let effect = super::shapes::effect(shape, &job.k, job.n, &meta, ddb).await?;
            tokio::time::sleep(took).await;
            Ok(effect)
        }
    }
}

/// Edge 4: an effect aimed at another job's items, three ways: a `Put`
/// whose attributes name the key attribute (its `pk` replaces the key, so
/// the write lands on the other job's counter, or on its marker), and a
/// `Put` to the marker's key through the table's ARN.
fn evil_effect(job: &SimJob) -> Effect {
    let target = format!("j{:04}", job.n % 200);
    let own = Key::string("pk", format!("evil#{}", job.k));
    let s = |v: String| AttributeValue::S(v);
    let write = match job.n % 3 {
        0 => Write::put(
            TABLE,
            own,
            [
                ("pk".to_owned(), s(format!("count#{target}"))),
                ("n".to_owned(), AttributeValue::N("7".into())),
            ]
            .into(),
        ),
        1 => Write::put(
            TABLE,
            own,
            [("pk".to_owned(), s(format!("idemq#job#{target}")))].into(),
        ),
        _ => Write::put(
            format!(
                "arn:aws:dynamodb:{}:{}:table/{TABLE}",
                sqs::REGION,
                sqs::ACCOUNT
            ),
            Key::string("pk", format!("idemq#job#{target}")),
            Default::default(),
        ),
    };
    Effect::new().with(write)
}

/// A send: when, which job, whether with `idemq-job-id`, and how many
/// producer attributes besides.
struct Send {
    at: Duration,
    body: String,
    k: String,
    stable: bool,
    attributes: usize,
}

fn schedule(config: &Config, rng: &mut StdRng) -> Vec<Send> {
    let window = config
        .edges
        .send_window
        .map_or(config.hours * 3600.0 * 0.75, |w| w.as_secs_f64());
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
            let e = &config.edges;
            let base = config.poison + config.garbage + config.later;
            if roll < base + e.evil {
                "evil"
            } else if roll < base + e.evil + e.ugly {
                "ugly"
            } else if roll < base + e.evil + e.ugly + e.huge {
                "huge"
            } else {
                "plain"
            }
        };
        let n: u64 = rng.random_range(0..1000);
        let mut body = if kind == "garbage" {
            json!({"k": k, "kind": kind, "n": "not a number"})
        } else {
            json!({"k": k, "kind": kind, "n": n})
        };
        if kind == "ugly" {
            // Fits a 1 KiB DLQ alone, not with idemq's context.
            body["pad"] = Value::String("p".repeat(850));
        }
        if let Some(g) = group_of(config, &k) {
            // The checker's FIFO order rule reads the group from here.
            body["g"] = Value::String(g);
        }
        let mut at = Duration::from_secs_f64(rng.random_range(0.0..window));
        if config.fifo.is_some() {
            // FIFO producers send in bursts (every 30 minutes, within 18 s),
            // so a group has several messages waiting at once: batches then
            // hold runs of one group, and a failure holds up the rest.
            let secs = at.as_secs_f64();
            at =
                Duration::from_secs_f64((secs / 1800.0).floor() * 1800.0 + (secs % 1800.0) / 100.0);
        }
        let stable = !rng.random_bool(config.message_id_jobs);
        // Drawn only when the edge asks for it: the campaign's seeds draw
        // as they did before.
        if !stable && config.edges.pointer_jobs > 0.0 && rng.random_bool(config.edges.pointer_jobs)
        {
            body["pid"] = Value::String(k.clone());
        }
        let attributes = if stable
            && config.edges.many_attributes > 0.0
            && rng.random_bool(config.edges.many_attributes)
        {
            9
        } else {
            0
        };
        let body = body.to_string();
        if stable && rng.random_bool(config.duplicates) {
            let again = at + Duration::from_secs(rng.random_range(1..7200));
            let again = config.edges.duplicate_gap.map_or(again, |gap| at + gap);
            sends.push(Send {
                at: again,
                body: body.clone(),
                k: k.clone(),
                stable,
                attributes,
            });
        }
        sends.push(Send {
            at,
            body,
            k,
            stable,
            attributes,
        });
    }
    sends.sort_by_key(|s| (s.at, s.k.clone()));
    sends
}

/// A FIFO run's message group for job `k`: from its name, drawing nothing
/// from the run's generator.
fn group_of(config: &Config, k: &str) -> Option<String> {
    let fifo = config.fifo?;
    let h = super::faults::hash(&[k.as_bytes()]);
    Some(format!("g{:02}", h % fifo.groups.max(1) as u64))
}

/// The producers: jobs with a stable id through idemq's `Producer` (over
/// the faulty network: a send whose answer is lost is retried, and may
/// leave two copies, which is what producers do); jobs known by their
/// MessageId straight onto the queue, once each (a producer that sends
/// such a job twice makes two jobs, which idemq does not promise to merge).
async fn produce(
    world: &Arc<Mutex<World>>,
    producer: &Producer,
    sends: Vec<Send>,
    config: &Config,
) {
    let start = world.lock().expect("world").started;
    let source = config.source();
    for s in sends {
        tokio::time::sleep_until(start + s.at).await;
        let group = group_of(config, &s.k);
        if s.stable {
            let mut job = Job::raw(s.k.clone(), s.body);
            if let Some(g) = group {
                job = job.in_group(g);
            }
            for i in 0..s.attributes {
                job.attributes.insert(
                    format!("producer-{i}"),
                    aws_sdk_sqs::types::MessageAttributeValue::builder()
                        .data_type("String")
                        .string_value(format!("v{i}"))
                        .build()
                        .expect("attribute"),
                );
            }
            if let Err(e) = producer.send_job(job).await {
                world
                    .lock()
                    .expect("world")
                    .trace(format!("producer: {} not sent: {e}", s.k));
            }
        } else {
            let mut w = world.lock().expect("world");
            let w = &mut *w;
            // On FIFO, as a plain send with content-based deduplication
            // would put it there: its group, the SHA-256 of its body.
            let fifo = group.map(|g| {
                use sha2::Digest;
                (g, hex::encode(sha2::Sha256::digest(s.body.as_bytes())))
            });
            let (id, _) = w.sqs.enqueue_in_group(
                source,
                s.body.clone(),
                BTreeMap::new(),
                idemq::testing::clock::now(),
                Duration::ZERO,
                fifo,
            );
            w.history.push(Event::Sent {
                queue: source.into(),
                message_id: id,
                body: s.body,
            });
            w.changed.notify_waiters();
        }
    }
}

/// `idemq dlq redrive --native --to <source>`: what the CLI checks first
/// (`check_native` in src/dlq/redrive/: a scan, and no letter known only
/// by its MessageId, unless `--force`), then the library's own `start_native` and
/// `native_status` until the task ends. `None`: refused, run idemq's
/// redrive instead.
async fn native_redrive(
    peek: &Peek,
    sqs_client: &aws_sdk_sqs::Client,
    resolver: &JobIdResolver,
    force: bool,
) -> Result<Option<u64>, idemq::failure::DlqError> {
    use idemq::dlq::redrive::{native_status, start_native};
    if !force {
        let scan = peek.scan(None, |_| {}).await?;
        peek.release(&scan.messages).await;
        let unstable = scan
            .messages
            .iter()
            .filter(|m| {
                matches!(
                    m.resolve(resolver),
                    Ok((_, idemq::job::JobIdSource::MessageId))
                )
            })
            .count();
        if unstable > 0 || scan.unseen > 0 {
            return Ok(None);
        }
    }
    let dlq_arn = peek.arn().await?;
    let to = peek.destination_arn(&sqs::url(SOURCE)).await?;
    start_native(sqs_client, &dlq_arn, Some(&to), Some(50)).await?;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if let Some(task) = native_status(sqs_client, &dlq_arn).await?
            && task.status != "RUNNING"
        {
            return Ok(Some(task.moved.max(0) as u64));
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
    // What `idemq dlq` builds from the environment: the failure records'
    // reader and the consumer's job id resolver.
    (dead_letters, resolver): (&idemq::dlq::records::Records, &JobIdResolver),
    config: &Config,
    end: Instant,
    // (redrives run, redrives stopped while still moving letters, letters
    // redrives could not move, letters move tasks moved), and the letters
    // redrives left as past the replay horizon
    (counts, refused): (&Mutex<OperatorCounts>, &Mutex<Refused>),
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
        let peek = Peek::new(
            sqs_client.clone(),
            sqs::url(config.dlq()),
            Duration::from_secs(600),
        );
        let work = async {
            if config.edges.native_redrive
                && let Some(moved) =
                    native_redrive(&peek, sqs_client, resolver, config.edges.force_native).await?
            {
                counts.lock().expect("counts").3 += moved;
                return Ok(idemq::dlq::redrive::RedriveReport::default());
            }
            let max = if bounded_redrive() {
                Some(peek.depth().await?.total() as usize)
            } else {
                None
            };
            let ttl = config
                .edges
                .marker_ttl
                .unwrap_or(idemq::config::DEFAULT_MARKER_TTL);
            let margin = config
                .edges
                .replay_margin
                .unwrap_or(idemq::config::REPLAY_WINDOW);
            let options = RedriveOptions {
                max,
                horizon: idemq::horizon::ReplayHorizon::new(ttl).with_margin(margin),
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
            Some(Ok(r)) => {
                counts.lock().expect("counts").2 += r.failed.len() as u64;
                refused
                    .lock()
                    .expect("refused")
                    .extend(r.past_horizon.iter().map(|p| p.message_id.clone()));
                format!(
                    "operator: redrive moved {}, failed {}, sent-not-deleted {}, past the horizon {}",
                    r.moved.len(),
                    r.failed.len(),
                    r.sent_not_deleted.len(),
                    r.past_horizon.len()
                )
            }
            Some(Err(e)) => format!("operator: redrive failed: {e}"),
        };
        world.lock().expect("world").trace(line);
    }
}
