//! PostgreSQL benchmark on the local server: idemq's `Postgres` store
//! against a plain consumer that runs the same effect SQL in its own
//! transaction without any dedup, in the same run, on the same server.
//!
//! The effect of every job is an order status upsert and a ledger insert
//! (2 statements). `BENCH_PG_JOBS` jobs per variant (default 2,000; `make
//! bench-postgres` runs 20,000), 10 in flight at once (a batch of 10 run
//! at once), each variant on fresh tables:
//!
//! - **idemq, look-up**: `Store::look_up` (the marker read before the
//!   handler, the store's default) then `Store::commit`;
//! - **idemq, commit only**: `Store::commit` alone (`with_look_up(false)`);
//! - **idemq batch**: 10 jobs as the batch core runs them: one
//!   `Store::look_up` of the 10, then one `Store::commit_batch` (their
//!   transactions pipelined on one connection), 10 jobs in flight as one
//!   batch; **idemq batch commit**: the same with no look-up (a handler
//!   that declares `LookUp::NotNeeded`);
//! - **plain**: the natural tokio-postgres code, statements prepared once
//!   per connection: `BEGIN`, the two statements, `COMMIT`, each awaited;
//! - **plain, pipelined**: the same four requests written at once (one
//!   round trip, as idemq's commit), for fairness;
//! - two more pipelined plain consumers that tell where idemq's server time
//!   goes: **unnamed** sends each statement unnamed with typed parameters
//!   (parsed and planned on every job, as idemq sends SQL), **+marker**
//!   inserts a marker row of idemq's shape with a prepared statement
//!   (idemq's rows without idemq's protocol).
//!
//! Two passes:
//!
//! 1. **Loopback**, straight to the server: jobs/s and p50/p99 latency per
//!    job, best of `BENCH_PG_ROUNDS` rounds (default 3) with the variants
//!    in alternating order.
//! 2. **Counted**, through an in-process TCP proxy that holds every answer
//!    of the server for `BENCH_PG_DELAY_MS` (default 2 ms) before passing
//!    it on (`BENCH_PG_COUNTED_JOBS` jobs, default a quarter of the jobs).
//!    The proxy parses the protocol in both directions (each message is a
//!    type byte and a length, after the untyped startup message) and counts
//!    round trips exactly: a client message that reaches the proxy while
//!    every `Sync` and simple `Query` the client sent before it has been
//!    answered (its `ReadyForQuery` passed on) and no message awaits a
//!    `Sync` starts a round trip; a message written while answers are still
//!    owed is part of the same pipeline. The delay is what makes this exact:
//!    a message pipelined behind others reaches the proxy within
//!    microseconds, long before the held answers, so it can never be taken
//!    for one sent after an answer; on plain loopback a fast server could
//!    answer a request before the client's next write of the same pipeline
//!    arrives. The warm-up (connections opened, statements prepared) is not
//!    counted. The pass also shows what round trips cost once a network is
//!    in the way.
//!
//! Then the markers table's size: as the loopback run left it, after
//! `VACUUM`, and for 1,000,000 markers of the same shape written by one
//! `INSERT … SELECT` (`BENCH_PG_FILL`, 0 to skip), with the primary key
//! (B-tree) and the BRIN index on `expires_at` apart. Every schema the
//! benchmark creates is dropped at the end.
//!
//! ```sh
//! make bench-postgres          # or: BENCH_PG_JOBS=2000 cargo run --release --features testing,postgres --example bench_postgres
//! ```

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures_util::future::{join4, join5};

use idemq::job::{JobId, PayloadHash};
use idemq::store::postgres::{Effect, Postgres, PostgresConfig, Sql};
use idemq::store::{CommitOutcome, JobRef};
use idemq::store::{LookedUp, Provision, Store};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_postgres::config::Host;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, NoTls, Statement};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Jobs in flight at once: a batch of 10 run at once.
const CONCURRENCY: usize = 10;
/// The source queue's name: the markers' namespace.
const QUEUE: &str = "orders";
/// Jobs run before each measurement, not counted: every connection opened
/// and every statement prepared.
const WARM_UP: usize = 200;
/// Distinct orders: with 20,000 jobs, half the upserts insert and half
/// update.
const ORDERS: usize = 10_000;

fn env_usize(var: &str, default: usize) -> Result<usize, Error> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Ok(v.parse().map_err(|e| format!("{var}={v}: {e}"))?),
        _ => Ok(default),
    }
}

/// One job: what a producer would send.
struct Job {
    id: String,
    order: String,
    cents: i64,
    body: String,
}

/// `n` jobs with random UUID-shaped ids (as producers' ids usually are, so
/// the markers' primary key grows at random places, not at its right edge).
fn jobs(n: usize, first: usize) -> Arc<Vec<Job>> {
    Arc::new(
        (first..first + n)
            .map(|i| {
                let r: u128 = rand::random();
                let h = format!("{r:032x}");
                let id = format!(
                    "{}-{}-{}-{}-{}",
                    &h[..8],
                    &h[8..12],
                    &h[12..16],
                    &h[16..20],
                    &h[20..]
                );
                let order = format!("o-{}", i % ORDERS);
                let cents = (i % 900 + 100) as i64;
                let body = format!(r#"{{"order_id":"{order}","cents":{cents}}}"#);
                Job {
                    id,
                    order,
                    cents,
                    body,
                }
            })
            .collect(),
    )
}

/// The effect's SQL for one schema.
struct Sqls {
    upsert: &'static str,
    ledger: &'static str,
}

impl Sqls {
    /// `job`'s effect: the upsert and the ledger insert.
    fn effect(&self, job: &Job) -> Effect {
        Effect::new()
            .execute(
                Sql::new(self.upsert)
                    .bind(job.order.clone())
                    .bind(job.cents),
            )
            .execute(
                Sql::new(self.ledger)
                    .bind(job.order.clone())
                    .bind(job.cents),
            )
    }

    /// Leaked: a handler's SQL is a `&'static str`, and a run makes a few.
    fn new(schema: &str) -> &'static Self {
        Box::leak(Box::new(Self {
            upsert: Box::leak(
                format!(
                    "INSERT INTO \"{schema}\".order_status (order_id, status, cents) VALUES ($1, 'paid', $2) \
                     ON CONFLICT (order_id) DO UPDATE SET status = EXCLUDED.status, cents = EXCLUDED.cents, updated_at = now()"
                )
                .into_boxed_str(),
            ),
            ledger: Box::leak(
                format!("INSERT INTO \"{schema}\".ledger (order_id, cents) VALUES ($1, $2)")
                    .into_boxed_str(),
            ),
        }))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    IdemqLookUp,
    IdemqCommit,
    /// Commit only, each statement prepared once per connection
    /// (`PostgresConfig::with_prepared_statements`).
    IdemqPrepared,
    Plain(Mode),
    /// A batch of 10 as the batch core runs it on PostgreSQL: one
    /// `Store::look_up` of its 10 jobs, then one `Store::commit_batch`
    /// (their transactions pipelined on one connection).
    IdemqBatch,
    /// The same batch with no look-up (a handler that declares
    /// `LookUp::NotNeeded`): one `Store::commit_batch`.
    IdemqBatchCommit,
}

/// How a plain consumer sends its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `BEGIN`, each statement, `COMMIT`, each awaited; statements
    /// prepared once per connection.
    Natural,
    /// The same four requests written at once.
    Pipelined,
    /// Pipelined, each statement sent unnamed with typed parameters
    /// (parsed and planned on every job), as idemq sends its SQL.
    Unnamed,
    /// Pipelined and prepared, with a marker row of idemq's shape inserted
    /// by hand into a provisioned markers table: idemq's work on the
    /// server without idemq.
    Marker,
}

const VARIANTS: [Variant; 9] = [
    Variant::IdemqLookUp,
    Variant::IdemqCommit,
    Variant::IdemqPrepared,
    Variant::Plain(Mode::Natural),
    Variant::Plain(Mode::Pipelined),
    Variant::Plain(Mode::Unnamed),
    Variant::Plain(Mode::Marker),
    Variant::IdemqBatch,
    Variant::IdemqBatchCommit,
];

/// Where the plain baselines are in [`VARIANTS`].
const NATURAL: usize = 3;
const PIPELINED: usize = 4;
const MARKER: usize = 6;
/// Where idemq's variants are in [`VARIANTS`].
const IDEMQ: [usize; 5] = [7, 8, 0, 1, 2];

impl Variant {
    fn label(self) -> &'static str {
        match self {
            Self::IdemqLookUp => "idemq look-up+commit",
            Self::IdemqCommit => "idemq commit only",
            Self::IdemqPrepared => "idemq commit prepared",
            Self::Plain(Mode::Natural) => "plain BEGIN..COMMIT",
            Self::Plain(Mode::Pipelined) => "plain pipelined",
            Self::Plain(Mode::Unnamed) => "plain pipel. unnamed",
            Self::Plain(Mode::Marker) => "plain pipel.+marker",
            Self::IdemqBatch => "idemq batch",
            Self::IdemqBatchCommit => "idemq batch commit",
        }
    }
}

/// One of the 10 jobs in flight, with what it keeps between jobs.
enum Worker {
    /// 10 jobs at once, as one batch.
    IdemqBatch {
        store: Postgres,
        sql: &'static Sqls,
        look_up: bool,
    },
    Idemq {
        store: Postgres,
        sql: &'static Sqls,
        look_up: bool,
    },
    Plain {
        client: Client,
        sql: &'static Sqls,
        upsert: Statement,
        ledger: Statement,
        /// Mode::Marker's insert.
        marker: Option<Statement>,
        mode: Mode,
    },
}

impl Worker {
    /// How many jobs it takes at once.
    fn width(&self) -> usize {
        match self {
            Self::IdemqBatch { .. } => CONCURRENCY,
            _ => 1,
        }
    }

    /// Runs `jobs` (as many as [`width`](Self::width) or the last few).
    async fn jobs(&mut self, jobs: &[Job]) -> Result<(), Error> {
        let Self::IdemqBatch {
            store,
            sql,
            look_up,
        } = self
        else {
            for job in jobs {
                self.job(job).await?;
            }
            return Ok(());
        };
        let ids = jobs
            .iter()
            .map(|j| JobId::new(j.id.as_str()))
            .collect::<Result<Vec<_>, _>>()?;
        let hashes: Vec<PayloadHash> = jobs
            .iter()
            .map(|j| PayloadHash::of(j.body.as_bytes()))
            .collect();
        let refs: Vec<JobRef<'_>> = ids
            .iter()
            .zip(&hashes)
            .map(|(id, hash)| JobRef {
                id,
                payload_hash: hash,
                queue: QUEUE,
            })
            .collect();
        let found = if *look_up {
            store.look_up(&refs).await
        } else {
            Vec::new()
        };
        for found in found {
            match found? {
                LookedUp::Absent => {}
                other => return Err(format!("look-up of a new job: {other:?}").into()),
            }
        }
        let effects: Vec<Effect> = jobs.iter().map(|job| sql.effect(job)).collect();
        let pairs: Vec<(JobRef<'_>, &Effect)> = refs.iter().copied().zip(&effects).collect();
        for settled in store.commit_batch(&pairs).await {
            match settled?.outcome {
                CommitOutcome::Committed => {}
                other => return Err(format!("commit of a new job: {other:?}").into()),
            }
        }
        Ok(())
    }

    async fn job(&mut self, job: &Job) -> Result<(), Error> {
        match self {
            Self::IdemqBatch { .. } => Err("a batch worker takes jobs by the batch".into()),
            Self::Idemq {
                store,
                sql,
                look_up,
            } => {
                let id = JobId::new(job.id.as_str())?;
                let hash = PayloadHash::of(job.body.as_bytes());
                let r = JobRef {
                    id: &id,
                    payload_hash: &hash,
                    queue: QUEUE,
                };
                if *look_up && store.looks_up() {
                    match store.look_up(std::slice::from_ref(&r)).await.remove(0)? {
                        LookedUp::Absent => {}
                        other => return Err(format!("look-up of a new job: {other:?}").into()),
                    }
                }
                let effect = sql.effect(job);
                let settled = store.commit(r, &effect).await?;
                match settled.outcome {
                    CommitOutcome::Committed => Ok(()),
                    other => Err(format!("commit of a new job: {other:?}").into()),
                }
            }
            Self::Plain {
                client,
                sql,
                upsert,
                ledger,
                marker,
                mode,
            } => {
                let client = &*client;
                let (upsert, ledger) = (&*upsert, &*ledger);
                let params: [&(dyn ToSql + Sync); 2] = [&job.order, &job.cents];
                let typed: [(&(dyn ToSql + Sync), Type); 2] =
                    [(&job.order, Type::TEXT), (&job.cents, Type::INT8)];
                // join polls its futures in order, so the requests are
                // queued in order before any answer is awaited
                // (tokio-postgres pipelines requests polled together).
                match mode {
                    Mode::Natural => {
                        client.batch_execute("BEGIN").await?;
                        client.execute(upsert, &params).await?;
                        client.execute(ledger, &params).await?;
                        client.batch_execute("COMMIT").await?;
                    }
                    Mode::Pipelined => {
                        let (b, u, l, c) = join4(
                            client.batch_execute("BEGIN"),
                            client.execute(upsert, &params),
                            client.execute(ledger, &params),
                            client.batch_execute("COMMIT"),
                        )
                        .await;
                        b?;
                        u?;
                        l?;
                        c?;
                    }
                    Mode::Unnamed => {
                        let (b, u, l, c) = join4(
                            client.batch_execute("BEGIN"),
                            client.execute_typed(sql.upsert, &typed),
                            client.execute_typed(sql.ledger, &typed),
                            client.batch_execute("COMMIT"),
                        )
                        .await;
                        b?;
                        u?;
                        l?;
                        c?;
                    }
                    Mode::Marker => {
                        let hash = PayloadHash::of(job.body.as_bytes());
                        let now = SystemTime::now();
                        let expires = now + idemq::config::DEFAULT_MARKER_TTL;
                        let none: Option<&str> = None;
                        let marker = marker.as_ref().ok_or("no marker statement")?;
                        let row: [&(dyn ToSql + Sync); 7] = [
                            &QUEUE,
                            &job.id,
                            &hash.as_str(),
                            &QUEUE,
                            &now,
                            &expires,
                            &none,
                        ];
                        let (b, m, u, l, c) = join5(
                            client.batch_execute("BEGIN"),
                            client.execute(marker, &row),
                            client.execute(upsert, &params),
                            client.execute(ledger, &params),
                            client.batch_execute("COMMIT"),
                        )
                        .await;
                        b?;
                        m?;
                        u?;
                        l?;
                        c?;
                    }
                }
                Ok(())
            }
        }
    }
}

/// What one measured run gave.
struct Measure {
    jobs: usize,
    secs: f64,
    /// Per job, sorted.
    latencies: Vec<Duration>,
}

impl Measure {
    fn jobs_per_sec(&self) -> f64 {
        self.jobs as f64 / self.secs
    }

    fn percentile_ms(&self, p: f64) -> f64 {
        let i =
            ((self.latencies.len() as f64 * p).ceil() as usize).clamp(1, self.latencies.len()) - 1;
        self.latencies[i].as_secs_f64() * 1e3
    }
}

/// Runs `jobs` on the workers, `CONCURRENCY` at once, and gives the
/// workers back.
async fn run(workers: Vec<Worker>, jobs: Arc<Vec<Job>>) -> Result<(Vec<Worker>, Measure), Error> {
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = workers
        .into_iter()
        .map(|mut w| {
            let next = Arc::clone(&next);
            let jobs = Arc::clone(&jobs);
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let width = w.width();
                loop {
                    let i = next.fetch_add(width, Ordering::Relaxed);
                    if i >= jobs.len() {
                        break;
                    }
                    let taken = &jobs[i..(i + width).min(jobs.len())];
                    let t = Instant::now();
                    w.jobs(taken).await?;
                    latencies.extend(taken.iter().map(|_| t.elapsed()));
                }
                Ok::<_, Error>((w, latencies))
            })
        })
        .collect();
    let mut workers = Vec::new();
    let mut latencies = Vec::new();
    for task in tasks {
        let (w, l) = task.await??;
        workers.push(w);
        latencies.extend(l);
    }
    let secs = start.elapsed().as_secs_f64();
    latencies.sort();
    Ok((
        workers,
        Measure {
            jobs: jobs.len(),
            secs,
            latencies,
        },
    ))
}

/// Connection settings: where to connect and as whom.
#[derive(Clone)]
struct Target {
    config: tokio_postgres::Config,
}

impl Target {
    /// `url` without TLS: the local server has none, and every variant is
    /// compared on the same plain TCP.
    fn from_url(url: &str) -> Result<Self, Error> {
        let mut config: tokio_postgres::Config = url.parse()?;
        config.ssl_mode(tokio_postgres::config::SslMode::Disable);
        Ok(Self { config })
    }

    /// The server's address (the first TCP host).
    fn addr(&self) -> Result<String, Error> {
        let host = match self.config.get_hosts().first() {
            Some(Host::Tcp(h)) => h.clone(),
            _ => return Err("IDEMQ_POSTGRES_URL must name a TCP host".into()),
        };
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        Ok(format!("{host}:{port}"))
    }

    /// The same login at `addr` (the proxy).
    fn via(&self, addr: SocketAddr) -> Self {
        // A new config: `Config::host` adds a host to the list.
        let mut config = tokio_postgres::Config::new();
        config
            .host(addr.ip().to_string())
            .port(addr.port())
            .ssl_mode(tokio_postgres::config::SslMode::Disable);
        if let Some(u) = self.config.get_user() {
            config.user(u);
        }
        if let Some(p) = self.config.get_password() {
            config.password(p);
        }
        if let Some(d) = self.config.get_dbname() {
            config.dbname(d);
        }
        Self { config }
    }

    /// In libpq's key-value form, for `PostgresConfig::new`.
    fn conninfo(&self) -> String {
        let quote = |v: &str| format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"));
        let mut parts = Vec::new();
        if let Some(Host::Tcp(h)) = self.config.get_hosts().first() {
            parts.push(format!("host={}", quote(h)));
        }
        if let Some(p) = self.config.get_ports().first() {
            parts.push(format!("port={p}"));
        }
        if let Some(u) = self.config.get_user() {
            parts.push(format!("user={}", quote(u)));
        }
        if let Some(p) = self.config.get_password() {
            parts.push(format!("password={}", quote(&String::from_utf8_lossy(p))));
        }
        if let Some(d) = self.config.get_dbname() {
            parts.push(format!("dbname={}", quote(d)));
        }
        parts.push("sslmode=disable".to_owned());
        parts.join(" ")
    }

    async fn connect(&self) -> Result<Client, Error> {
        let (client, connection) = self.config.connect(NoTls).await?;
        tokio::spawn(connection);
        Ok(client)
    }
}

/// Creates schema `schema` with the effect's tables (and idemq's, through
/// its own provisioner, for the idemq variants).
async fn tables(admin: &Client, schema: &str) -> Result<(), Error> {
    admin
        .batch_execute(&format!(
            "CREATE SCHEMA \"{schema}\";
             CREATE TABLE \"{schema}\".order_status (
                 order_id text PRIMARY KEY, status text NOT NULL, cents bigint NOT NULL,
                 updated_at timestamptz NOT NULL DEFAULT now());
             CREATE TABLE \"{schema}\".ledger (
                 entry_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                 order_id text NOT NULL, cents bigint NOT NULL,
                 at timestamptz NOT NULL DEFAULT now());"
        ))
        .await?;
    Ok(())
}

fn idemq_store(
    target: &Target,
    schema: &str,
    look_up: bool,
    prepare: bool,
) -> Result<Postgres, Error> {
    Ok(Postgres::new(
        PostgresConfig::new(target.conninfo())
            .with_schema(schema)?
            .with_look_up(look_up)
            .with_prepared_statements(prepare)
            .with_pool_size(CONCURRENCY)
            // The hourly deletion of expired markers would add one DELETE
            // on the first commit; nothing here is expired.
            .with_sweep_every(None),
    )?)
}

/// The workers of `variant` on fresh tables in `schema`.
async fn workers(
    variant: Variant,
    target: &Target,
    admin: &Client,
    schema: &str,
) -> Result<Vec<Worker>, Error> {
    tables(admin, schema).await?;
    let sql = Sqls::new(schema);
    match variant {
        Variant::IdemqLookUp
        | Variant::IdemqCommit
        | Variant::IdemqPrepared
        | Variant::IdemqBatch
        | Variant::IdemqBatchCommit => {
            let look_up = matches!(variant, Variant::IdemqLookUp | Variant::IdemqBatch);
            let prepare = variant == Variant::IdemqPrepared;
            // Provisioned on the admin's direct connection: `idemq init`
            // is not part of any measurement.
            let direct = Target::from_url(&std::env::var("IDEMQ_POSTGRES_URL")?)?;
            idemq_store(&direct, schema, look_up, prepare)?
                .schema()
                .provision(&mut Vec::new())
                .await?;
            let store = idemq_store(target, schema, look_up, prepare)?;
            if matches!(variant, Variant::IdemqBatch | Variant::IdemqBatchCommit) {
                return Ok(vec![Worker::IdemqBatch {
                    store,
                    sql,
                    look_up: variant == Variant::IdemqBatch,
                }]);
            }
            Ok((0..CONCURRENCY)
                .map(|_| Worker::Idemq {
                    store: store.clone(),
                    sql,
                    look_up,
                })
                .collect())
        }
        Variant::Plain(mode) => {
            if mode == Mode::Marker {
                let direct = Target::from_url(&std::env::var("IDEMQ_POSTGRES_URL")?)?;
                idemq_store(&direct, schema, false, false)?
                    .schema()
                    .provision(&mut Vec::new())
                    .await?;
            }
            let mut out = Vec::new();
            for _ in 0..CONCURRENCY {
                let client = target.connect().await?;
                let upsert = client.prepare(sql.upsert).await?;
                let ledger = client.prepare(sql.ledger).await?;
                let marker = if mode == Mode::Marker {
                    Some(
                        client
                            .prepare_typed(
                                &format!(
                                    "INSERT INTO \"{schema}\".markers \
                                     (namespace, job_id, payload_hash, queue, committed_at, expires_at, follow_ups) \
                                     VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb)"
                                ),
                                &[
                                    Type::TEXT,
                                    Type::TEXT,
                                    Type::TEXT,
                                    Type::TEXT,
                                    Type::TIMESTAMPTZ,
                                    Type::TIMESTAMPTZ,
                                    Type::TEXT,
                                ],
                            )
                            .await?,
                    )
                } else {
                    None
                };
                out.push(Worker::Plain {
                    client,
                    sql,
                    upsert,
                    ledger,
                    marker,
                    mode,
                });
            }
            Ok(out)
        }
    }
}

/// Warms `variant` up, then measures it on `n` jobs; `counts` (the
/// proxy's) are zeroed between the two.
async fn measure(
    variant: Variant,
    target: &Target,
    admin: &Client,
    schema: &str,
    n: usize,
    counts: Option<&Counts>,
) -> Result<Measure, Error> {
    let ws = workers(variant, target, admin, schema).await?;
    let (ws, _) = run(ws, jobs(WARM_UP, 0)).await?;
    if let Some(c) = counts {
        c.reset();
    }
    let (_ws, m) = run(ws, jobs(n, WARM_UP)).await?;
    Ok(m)
}

// ---------------------------------------------------------------------
// The counting proxy.

/// What the proxy counted since the last reset.
#[derive(Default)]
struct Counts {
    round_trips: AtomicU64,
    /// `Sync` and `Query` messages: the requests the server answers with
    /// `ReadyForQuery`.
    syncs: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
}

impl Counts {
    fn reset(&self) {
        for c in [
            &self.round_trips,
            &self.syncs,
            &self.bytes_up,
            &self.bytes_down,
        ] {
            c.store(0, Ordering::SeqCst);
        }
    }

    fn get(&self) -> [u64; 4] {
        [
            self.round_trips.load(Ordering::SeqCst),
            self.syncs.load(Ordering::SeqCst),
            self.bytes_up.load(Ordering::SeqCst),
            self.bytes_down.load(Ordering::SeqCst),
        ]
    }
}

/// One connection's protocol state, as the proxy sees it.
#[derive(Default)]
struct Session {
    /// The server said `ReadyForQuery` once: authentication is over.
    ready: bool,
    /// `Sync`s and `Query`s sent whose `ReadyForQuery` has not been passed
    /// on to the client yet.
    owed: u64,
    /// A message was sent since the last `Sync` (its answer will come with
    /// the next `Sync`'s).
    unsynced: bool,
}

/// Splits a byte stream into protocol messages: each is a type byte and a
/// big-endian length that counts itself, except a client's first message
/// (the startup message: a length only). Calls `on` with each message's
/// type as soon as its header is in.
struct Frames {
    typed: bool,
    head: [u8; 5],
    have: usize,
    skip: usize,
}

impl Frames {
    fn new(typed: bool) -> Self {
        Self {
            typed,
            head: [0; 5],
            have: 0,
            skip: 0,
        }
    }

    fn feed(&mut self, mut data: &[u8], mut on: impl FnMut(u8)) {
        while !data.is_empty() {
            if self.skip > 0 {
                let k = self.skip.min(data.len());
                self.skip -= k;
                data = &data[k..];
                continue;
            }
            let need = if self.typed { 5 } else { 4 };
            let k = (need - self.have).min(data.len());
            self.head[self.have..self.have + k].copy_from_slice(&data[..k]);
            self.have += k;
            data = &data[k..];
            if self.have == need {
                let len = &self.head[need - 4..need];
                let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
                self.skip = len.saturating_sub(4);
                if self.typed {
                    on(self.head[0]);
                } else {
                    // The startup message (TLS is off, so no SSLRequest
                    // comes first): typed messages from here on.
                    self.typed = true;
                }
                self.have = 0;
            }
        }
    }
}

/// A proxy on loopback in front of `server` that holds each answer of the
/// server for `delay` and counts what passes (the module doc).
async fn proxy(server: String, delay: Duration) -> Result<(SocketAddr, Arc<Counts>), Error> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let counts = Arc::new(Counts::default());
    let c = Arc::clone(&counts);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = server.clone();
            let counts = Arc::clone(&c);
            tokio::spawn(async move {
                if let Err(e) = relay(client, &server, counts, delay).await {
                    eprintln!("proxy: {e}");
                }
            });
        }
    });
    Ok((addr, counts))
}

async fn relay(
    client: TcpStream,
    server: &str,
    counts: Arc<Counts>,
    delay: Duration,
) -> Result<(), Error> {
    let upstream = TcpStream::connect(server).await?;
    client.set_nodelay(true)?;
    upstream.set_nodelay(true)?;
    let (mut client_r, mut client_w) = client.into_split();
    let (mut server_r, mut server_w) = upstream.into_split();
    let session = Arc::new(Mutex::new(Session::default()));

    // Client to server, at once; round trips counted on the way.
    let up = {
        let session = Arc::clone(&session);
        let counts = Arc::clone(&counts);
        tokio::spawn(async move {
            let mut frames = Frames::new(false);
            let mut buf = vec![0; 64 * 1024];
            loop {
                let n = client_r.read(&mut buf).await?;
                if n == 0 {
                    break;
                }
                {
                    let mut s = session.lock().unwrap();
                    frames.feed(&buf[..n], |kind| {
                        if !s.ready || kind == b'X' {
                            return;
                        }
                        if s.owed == 0 && !s.unsynced {
                            counts.round_trips.fetch_add(1, Ordering::SeqCst);
                        }
                        if kind == b'S' || kind == b'Q' {
                            counts.syncs.fetch_add(1, Ordering::SeqCst);
                            s.owed += 1;
                            s.unsynced = false;
                        } else {
                            s.unsynced = true;
                        }
                    });
                    if s.ready {
                        counts.bytes_up.fetch_add(n as u64, Ordering::SeqCst);
                    }
                }
                server_w.write_all(&buf[..n]).await?;
            }
            server_w.shutdown().await?;
            Ok::<_, std::io::Error>(())
        })
    };

    // Server to client: each read held until `delay` after it arrived, in
    // order; its ReadyForQuery messages settle what is owed just before
    // the client can see them.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>, u64)>();
    let read_down = tokio::spawn(async move {
        let mut frames = Frames::new(true);
        let mut buf = vec![0; 64 * 1024];
        loop {
            let n = server_r.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            let mut ready = 0;
            frames.feed(&buf[..n], |kind| {
                if kind == b'Z' {
                    ready += 1;
                }
            });
            if tx
                .send((Instant::now() + delay, buf[..n].to_vec(), ready))
                .is_err()
            {
                break;
            }
        }
        Ok::<_, std::io::Error>(())
    });
    let write_down = tokio::spawn(async move {
        while let Some((due, bytes, mut ready)) = rx.recv().await {
            tokio::time::sleep_until(due.into()).await;
            {
                let mut s = session.lock().unwrap();
                if !s.ready && ready > 0 {
                    s.ready = true;
                    ready -= 1;
                } else if s.ready {
                    counts
                        .bytes_down
                        .fetch_add(bytes.len() as u64, Ordering::SeqCst);
                }
                s.owed = s.owed.saturating_sub(ready);
            }
            client_w.write_all(&bytes).await?;
        }
        client_w.shutdown().await?;
        Ok::<_, std::io::Error>(())
    });
    // A side that closes ends the others.
    let _ = up.await;
    let _ = read_down.await;
    let _ = write_down.await;
    Ok(())
}

// ---------------------------------------------------------------------
// The markers' size.

/// Sizes of `schema`'s markers table, in bytes.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    rows: i64,
    total: i64,
    heap: i64,
    indexes: i64,
    btree: i64,
    brin: i64,
}

async fn sizes(admin: &Client, schema: &str) -> Result<Sizes, Error> {
    let table = format!("\"{schema}\".markers");
    let row = admin
        .query_one(
            "SELECT pg_total_relation_size($1::text::regclass), pg_relation_size($1::text::regclass), \
                    pg_indexes_size($1::text::regclass)",
            &[&table],
        )
        .await?;
    let rows: i64 = admin
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await?
        .get(0);
    let mut s = Sizes {
        rows,
        total: row.get(0),
        heap: row.get(1),
        indexes: row.get(2),
        btree: 0,
        brin: 0,
    };
    for r in admin
        .query(
            "SELECT am.amname::text, pg_relation_size(i.indexrelid) \
             FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam \
             WHERE i.indrelid = $1::text::regclass",
            &[&table],
        )
        .await?
    {
        let am: String = r.get(0);
        let bytes: i64 = r.get(1);
        match am.as_str() {
            "btree" => s.btree += bytes,
            "brin" => s.brin += bytes,
            other => return Err(format!("unexpected index kind {other} on markers").into()),
        }
    }
    Ok(s)
}

/// `n` markers shaped like the run's (namespace and queue `orders`, a
/// UUID job id, a SHA-256 hex hash, times in commit order, no follow-ups),
/// written by one statement into a fresh idemq schema.
async fn fill(admin: &Client, schema: &str, n: i64) -> Result<(), Error> {
    let direct = Target::from_url(&std::env::var("IDEMQ_POSTGRES_URL")?)?;
    idemq_store(&direct, schema, false, false)?
        .schema()
        .provision(&mut Vec::new())
        .await?;
    let ttl = idemq::config::DEFAULT_MARKER_TTL.as_secs() as f64;
    admin
        .execute(
            &format!(
                "INSERT INTO \"{schema}\".markers \
                 (namespace, job_id, payload_hash, queue, committed_at, expires_at, follow_ups) \
                 SELECT 'orders', gen_random_uuid()::text, encode(sha256(g::text::bytea), 'hex'), 'orders', \
                        t, t + make_interval(secs => $2::float8), NULL \
                 FROM generate_series(1::bigint, $1::bigint) g, LATERAL (SELECT now() + g * interval '1 millisecond' AS t) x"
            ),
            &[&n, &ttl],
        )
        .await?;
    Ok(())
}

fn per_million(bytes: i64, rows: i64) -> f64 {
    bytes as f64 * 1e6 / rows as f64 / (1024.0 * 1024.0)
}

fn print_sizes(label: &str, s: Sizes) {
    println!(
        "{label:<34}{:>9}{:>11.1}{:>11.1}{:>11.1}{:>11.1}{:>11.3}",
        s.rows,
        per_million(s.total, s.rows),
        per_million(s.heap, s.rows),
        per_million(s.btree, s.rows),
        per_million(s.indexes, s.rows),
        per_million(s.brin, s.rows),
    );
    println!(
        "{:<34}{:>9}{:>11}{:>11}{:>11}{:>11}{:>11}",
        "  (bytes as measured)", "", s.total, s.heap, s.btree, s.indexes, s.brin
    );
}

// ---------------------------------------------------------------------

#[tokio::main]
async fn main() -> Result<(), Error> {
    let n = env_usize("BENCH_PG_JOBS", 2_000)?;
    let rounds = env_usize("BENCH_PG_ROUNDS", 3)?.max(1);
    let delay = Duration::from_millis(env_usize("BENCH_PG_DELAY_MS", 2)? as u64);
    let counted_n = env_usize("BENCH_PG_COUNTED_JOBS", (n / 4).max(500))?;
    let fill_n = env_usize("BENCH_PG_FILL", 1_000_000)? as i64;
    let url = std::env::var("IDEMQ_POSTGRES_URL").map_err(|_| {
        "IDEMQ_POSTGRES_URL is not set: run `make bench-postgres`, or `make stack-up` and \
         `set -a; . .state/stack.env; set +a` first"
    })?;
    let direct = Target::from_url(&url)?;
    let admin = direct.connect().await?;
    let version: String = admin.query_one("SHOW server_version", &[]).await?.get(0);
    let run_id = format!("bench_pg_{:08x}", rand::random::<u32>());
    let mut schemas = Vec::new();
    let mut schema = |tag: &str| {
        let s = format!("{run_id}_{tag}");
        schemas.push(s.clone());
        s
    };

    // Pass 1: loopback, best of `rounds`.
    let mut best: Vec<Option<Measure>> = VARIANTS.iter().map(|_| None).collect();
    let mut all_rates: Vec<Vec<f64>> = VARIANTS.iter().map(|_| Vec::new()).collect();
    let mut sized = None;
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..VARIANTS.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for k in order {
            let variant = VARIANTS[k];
            let s = schema(&format!("r{round}_{k}"));
            let m = measure(variant, &direct, &admin, &s, n, None).await?;
            eprintln!(
                "round {round}: {:<22} {:>8.0} jobs/s  p50 {:.2} ms  p99 {:.2} ms",
                variant.label(),
                m.jobs_per_sec(),
                m.percentile_ms(0.5),
                m.percentile_ms(0.99)
            );
            all_rates[k].push(m.jobs_per_sec());
            if variant == Variant::IdemqCommit && sized.is_none() {
                sized = Some(s.clone());
            }
            if best[k]
                .as_ref()
                .is_none_or(|b| m.jobs_per_sec() > b.jobs_per_sec())
            {
                best[k] = Some(m);
            }
        }
    }
    let best: Vec<Measure> = best.into_iter().map(|m| m.expect("measured")).collect();

    // Pass 2: through the counting proxy, answers held for `delay`.
    let (proxy_addr, counts) = proxy(direct.addr()?, delay).await?;
    let via = direct.via(proxy_addr);
    let mut counted = Vec::new();
    for (k, &variant) in VARIANTS.iter().enumerate() {
        let s = schema(&format!("c_{k}"));
        let m = measure(variant, &via, &admin, &s, counted_n, Some(&counts)).await?;
        let c = counts.get();
        eprintln!(
            "counted: {:<22} {:>8.0} jobs/s  {:.3} round trips/job",
            variant.label(),
            m.jobs_per_sec(),
            c[0] as f64 / m.jobs as f64
        );
        counted.push((m, c));
    }

    // The markers' size: as the loopback run left them, after VACUUM, and
    // for `fill_n` markers of the same shape.
    let sized = sized.expect("the commit-only variant ran");
    let as_run = sizes(&admin, &sized).await?;
    admin
        .batch_execute(&format!("VACUUM (ANALYZE) \"{sized}\".markers"))
        .await?;
    let vacuumed = sizes(&admin, &sized).await?;
    let filled = if fill_n > 0 {
        let s = schema("fill");
        let t = Instant::now();
        fill(&admin, &s, fill_n).await?;
        let as_filled = sizes(&admin, &s).await?;
        admin
            .batch_execute(&format!("VACUUM (ANALYZE) \"{s}\".markers"))
            .await?;
        Some((as_filled, sizes(&admin, &s).await?, t.elapsed()))
    } else {
        None
    };

    // The report.
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!();
    println!(
        "PostgreSQL benchmark: PostgreSQL {version} on loopback, {cores} cores; {CONCURRENCY} jobs in flight (batch 10 run at once)"
    );
    println!(
        "effect per job: an order status upsert + a ledger insert; every variant on fresh tables"
    );
    print!("{:<34}", "");
    for v in VARIANTS {
        print!("{:>22}", v.label());
    }
    println!();
    let row = |label: &str, f: &dyn Fn(usize) -> String| {
        print!("{label:<34}");
        for k in 0..VARIANTS.len() {
            print!("{:>22}", f(k));
        }
        println!();
    };
    println!("loopback, {n} jobs, best of {rounds} rounds:");
    row("  jobs/s", &|k| format!("{:.0}", best[k].jobs_per_sec()));
    row("  jobs/s, every round", &|k| {
        all_rates[k]
            .iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join("/")
    });
    row("  p50 / p99 latency per job, ms", &|k| {
        format!(
            "{:.2} / {:.2}",
            best[k].percentile_ms(0.5),
            best[k].percentile_ms(0.99)
        )
    });
    println!(
        "through the counting proxy, {counted_n} jobs, each answer held {} ms:",
        delay.as_millis()
    );
    row("  round trips per job", &|k| {
        format!("{:.3}", counted[k].1[0] as f64 / counted[k].0.jobs as f64)
    });
    row("  Sync+Query messages per job", &|k| {
        format!("{:.3}", counted[k].1[1] as f64 / counted[k].0.jobs as f64)
    });
    row("  bytes up / down per job", &|k| {
        let j = counted[k].0.jobs as f64;
        format!(
            "{:.0} / {:.0}",
            counted[k].1[2] as f64 / j,
            counted[k].1[3] as f64 / j
        )
    });
    row("  jobs/s", &|k| {
        format!("{:.0}", counted[k].0.jobs_per_sec())
    });
    row("  p50 / p99 latency per job, ms", &|k| {
        format!(
            "{:.2} / {:.2}",
            counted[k].0.percentile_ms(0.5),
            counted[k].0.percentile_ms(0.99)
        )
    });
    println!();
    println!("ratios idemq / plain (jobs/s; round trips per job):");
    for i in IDEMQ {
        for p in [NATURAL, PIPELINED, MARKER] {
            let rt = |k: usize| counted[k].1[0] as f64 / counted[k].0.jobs as f64;
            println!(
                "  {:<22} / {:<20} loopback {:.3}x   +{} ms {:.3}x   round trips {:.3} vs {:.3}",
                VARIANTS[i].label(),
                VARIANTS[p].label(),
                best[i].jobs_per_sec() / best[p].jobs_per_sec(),
                delay.as_millis(),
                counted[i].0.jobs_per_sec() / counted[p].0.jobs_per_sec(),
                rt(i),
                rt(p),
            );
        }
    }
    println!();
    println!("markers table, MiB per million markers (measured bytes scaled to 1e6 rows):");
    println!(
        "{:<34}{:>9}{:>11}{:>11}{:>11}{:>11}{:>11}",
        "", "rows", "total", "heap", "pkey", "indexes", "brin"
    );
    print_sizes("after the commit-only run", as_run);
    print_sizes("  the same, after VACUUM", vacuumed);
    if let Some((as_filled, vacuumed, took)) = filled {
        print_sizes(
            &format!("{fill_n} filled ({:.0} s)", took.as_secs_f64()),
            as_filled,
        );
        print_sizes("  the same, after VACUUM", vacuumed);
    }

    for s in &schemas {
        admin
            .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{s}\" CASCADE"))
            .await?;
    }
    Ok(())
}
