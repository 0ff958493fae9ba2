//! The bench harness: the peers' resources, their function processes, the
//! fault proxies in front of the emulators.

use super::*;

pub(crate) struct Bench {
    pub(crate) args: Args,
    pub(crate) run: String,
    pub(crate) root: PathBuf,
    pub(crate) ddb_proxy: Arc<Proxy>,
    pub(crate) sqs_proxy: Arc<Proxy>,
    pub(crate) ddb: aws_sdk_dynamodb::Client,
    /// An SQS client whose requests go through the proxy (the ESM's).
    pub(crate) sqs_via_proxy: aws_sdk_sqs::Client,
    pub(crate) resources: BTreeMap<Peer, Resources>,
    pub(crate) logs: PathBuf,
}

impl Bench {
    /// The command that starts `peer` as a function process (Runtime API
    /// variables are added by [`Instance::spawn`]).
    pub(crate) fn command(&self, peer: Peer, concurrency: usize) -> Command {
        let r = &self.resources[&peer];
        let mut cmd = if peer.rust() {
            let mut c = Command::new(&self.args.bootstrap);
            c.env("BENCH_PEER", peer.name())
                .env("IDEMQ_CONCURRENCY", concurrency.to_string());
            c
        } else {
            let mut c = Command::new(&self.args.python);
            c.arg(self.root.join("bench/powertools/runtime.py"))
                .env("_HANDLER", "handler.lambda_handler")
                .env("POWERTOOLS_IDEMPOTENCY_TABLE", &r.idempotency_table)
                .env("PYTHONDONTWRITEBYTECODE", "1");
            c
        };
        for v in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "http_proxy",
            "https_proxy",
            "ALL_PROXY",
        ] {
            cmd.env_remove(v);
        }
        cmd.env("IDEMQ_TABLE", &r.table)
            .env("AWS_ENDPOINT_URL", self.sqs_proxy.url())
            .env("AWS_ENDPOINT_URL_SQS", self.sqs_proxy.url())
            .env("AWS_ENDPOINT_URL_DYNAMODB", self.ddb_proxy.url())
            .env("AWS_REGION", "us-east-1")
            .env("AWS_DEFAULT_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("NO_PROXY", "127.0.0.1,localhost");
        cmd
    }

    pub(crate) async fn spawn(
        &self,
        peer: Peer,
        concurrency: usize,
        tag: &str,
    ) -> Result<(Instance, Duration), Error> {
        self.spawn_env(peer, concurrency, tag, &[]).await
    }

    /// [`Bench::spawn`] with more environment variables (set last, so they
    /// override the peer's own).
    pub(crate) async fn spawn_env(
        &self,
        peer: Peer,
        concurrency: usize,
        tag: &str,
        env: &[(&str, &str)],
    ) -> Result<(Instance, Duration), Error> {
        let label = format!("{}-c{concurrency}-{tag}", peer.name());
        let log = self.logs.join(format!("{label}.log"));
        let mut cmd = self.command(peer, concurrency);
        cmd.envs(env.iter().copied());
        let mut inst = Instance::spawn(&label, cmd, &log).await?;
        let init = inst.ready(Duration::from_secs(60)).await.map_err(|e| {
            let tail = std::fs::read_to_string(&log).unwrap_or_default();
            format!(
                "{e}\n{}",
                tail.lines().rev().take(20).collect::<Vec<_>>().join("\n")
            )
        })?;
        Ok((inst, init))
    }

    /// A one-job batch so that the instance is warm: clients built,
    /// connections open, idemq's queue discovery done.
    pub(crate) async fn warm(&self, peer: Peer, inst: &mut Instance) -> Result<Duration, Error> {
        let mut jobs = Jobs::new(format!("{}-warm-{}", self.run, inst.label));
        let ev = event(&self.resources[&peer].queue_arn, &jobs.batch(1));
        let (answer, took) = inst.invoke(ev).await?;
        if failures(&answer, 1) != 0 {
            return Err(format!("{}: warm-up batch failed: {answer:?}", inst.label).into());
        }
        Ok(took)
    }

    pub(crate) fn set_delay(&self, ms: u64) {
        self.ddb_proxy.set_delay(Duration::from_millis(ms));
        self.sqs_proxy.set_delay(Duration::from_millis(ms));
    }

    /// Back-to-back batches on each instance (all at once) until the cell's
    /// time is up.
    pub(crate) async fn cell(
        &self,
        peer: Peer,
        instances: &mut [Instance],
        batch: usize,
        concurrency: usize,
        delay_ms: u64,
        tag: &str,
    ) -> Result<Cell, Error> {
        self.set_delay(delay_ms);
        let (min, max) = (
            Duration::from_secs_f64(self.args.cell_secs),
            Duration::from_secs_f64(self.args.cell_secs * 3.0),
        );
        let arn = self.resources[&peer].queue_arn.clone();
        let (ddb0, sqs0) = (self.ddb_proxy.counts(), self.sqs_proxy.counts());
        let single = instances.len() == 1;
        if single {
            self.ddb_proxy.record();
        }
        let start = Instant::now();
        let loops = instances.iter_mut().enumerate().map(|(i, inst)| {
            let arn = arn.clone();
            let mut jobs = Jobs::new(format!("{}-{tag}-{i}", self.run));
            async move {
                let (mut durations, mut n, mut failed) = (Vec::new(), 0u64, 0u64);
                let mut windows = Vec::new();
                loop {
                    let elapsed = start.elapsed();
                    let enough = elapsed >= min && durations.len() >= 5;
                    if !durations.is_empty() && (enough || elapsed >= max) {
                        break;
                    }
                    let ev = event(&arn, &jobs.batch(batch));
                    let t = Instant::now();
                    let (answer, took) = inst.invoke(ev).await?;
                    windows.push((t, Instant::now()));
                    failed += failures(&answer, batch);
                    n += batch as u64;
                    durations.push(took.as_secs_f64() * 1000.0);
                }
                Ok::<_, Error>((durations, n, failed, windows))
            }
        });
        let mut durations = Vec::new();
        let (mut jobs, mut failed, mut windows) = (0, 0, Vec::new());
        for r in join_all(loops).await {
            let (d, n, f, w) = r?;
            durations.extend(d);
            jobs += n;
            failed += f;
            windows.extend(w);
        }
        let (rt_p50, rt_max, ddb_busy_ms) = if single {
            let timeline = self.ddb_proxy.take_timeline();
            let depths: Vec<u64> = windows
                .iter()
                .map(|w| proxy::depth(&timeline, *w))
                .collect();
            let as_f: Vec<f64> = depths.iter().map(|d| *d as f64).collect();
            let busy: Vec<f64> = windows
                .iter()
                .map(|w| proxy::busy(&timeline, *w).as_secs_f64() * 1000.0)
                .collect();
            (
                Some(median(&as_f)),
                depths.iter().copied().max(),
                Some(median(&busy)),
            )
        } else {
            (None, None, None)
        };
        let wall = start.elapsed().as_secs_f64();
        let ddb = diff(&self.ddb_proxy.counts(), &ddb0);
        let sqs = diff(&self.sqs_proxy.counts(), &sqs0);
        durations.sort_by(f64::total_cmp);
        let per = |x: u64| x as f64 / jobs as f64;
        let cell = Cell {
            peer,
            delay_ms,
            batch,
            concurrency,
            instances: instances.len(),
            jobs,
            batches: durations.len() as u64,
            failed_jobs: failed,
            wall_s: wall,
            jobs_per_s: jobs as f64 / wall,
            p50_ms: percentile(&durations, 50.0),
            p99_ms: percentile(&durations, 99.0),
            mean_ms: durations.iter().sum::<f64>() / durations.len() as f64,
            ddb_requests_per_job: per(total(&ddb).requests),
            wru_per_job: per(total(&ddb).wru),
            sqs_requests_per_job: per(total(&sqs).requests),
            rtt_ms: total(&ddb).delayed_us as f64 / 1000.0 / total(&ddb).requests.max(1) as f64,
            rt_p50,
            rt_max,
            ddb_busy_ms,
            ddb_ops: ddb,
            sqs_ops: sqs,
        };
        println!(
            "  {:<10} delay {:>2} ms  batch {:>3}  conc {:>2}  inst {:>2}: {:>7.1} jobs/s  p50 {:>7.1} ms  p99 {:>7.1} ms  RT {:>5}  ddb {:.3}/job  wru {:.2}/job  sqs {:.3}/job{}",
            peer.name(),
            delay_ms,
            batch,
            concurrency,
            cell.instances,
            cell.jobs_per_s,
            cell.p50_ms,
            cell.p99_ms,
            cell.rt_p50.map_or("–".into(), |r| format!("{r:.0}")),
            cell.ddb_requests_per_job,
            cell.wru_per_job,
            cell.sqs_requests_per_job,
            if failed > 0 {
                format!("  FAILED {failed}")
            } else {
                String::new()
            }
        );
        Ok(cell)
    }
}

pub(crate) async fn setup(
    c: &(aws_sdk_sqs::Client, aws_sdk_dynamodb::Client),
    run: &str,
    peer: Peer,
) -> Result<Resources, Error> {
    let name = format!("{run}-{}", peer.name());
    let spec = InitSpec {
        queue_name: name.clone(),
        fifo: false,
        max_receive_count: 6,
        visibility_timeout: Duration::from_secs(120),
        layout: TableLayout::new(&name),
        marker_ttl: idemq::config::DEFAULT_MARKER_TTL,
    };
    let res = init(&c.0, &c.1, &spec).await?;
    let attrs =
        c.0.get_queue_attributes()
            .queue_url(&res.queue_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await?;
    let queue_arn = attrs
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn))
        .cloned()
        .ok_or("queue without an ARN")?;
    let idempotency_table = format!("{name}-idempotency");
    if peer == Peer::Powertools {
        // Powertools' own layout: partition key `id`.
        c.1.create_table()
            .table_name(&idempotency_table)
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name("id")
                    .attribute_type(ScalarAttributeType::S)
                    .build()?,
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name("id")
                    .key_type(KeyType::Hash)
                    .build()?,
            )
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await?;
    }
    Ok(Resources {
        queue_url: res.queue_url,
        queue_arn,
        table: res.table_name,
        idempotency_table,
    })
}

pub(crate) async fn balance(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    account: &str,
) -> Result<i64, Error> {
    let out = ddb
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(format!("account#{account}")))
        .consistent_read(true)
        .send()
        .await?;
    Ok(out
        .item()
        .and_then(|i| i.get("balance"))
        .and_then(|b| b.as_n().ok())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0))
}
