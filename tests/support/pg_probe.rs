//! The PostgreSQL probe: the chaos suite's worker (`tests/chaos.rs`) for
//! the PostgreSQL store, run as local worker processes.
//!
//! A job is `{"id": "...", "action": "ok" | "sleep", "ms": 1500}`:
//! - `ok` adds 1 to the job's counter row (`probe`, keyed by the job's
//!   `id`, in the schema `IDEMQ_POSTGRES_SCHEMA`), committed with the
//!   dedup marker. The statement is not idempotent on its own (`n = n +
//!   1`), so a job applied twice shows as 2;
//! - `sleep` sleeps `ms` milliseconds (default 0), then does what `ok`
//!   does.
//!
//! At start it creates its table if missing, in idemq's schema (which
//! must exist: `idemq init --store postgres`, or the test provisions it).
//! It runs through `idemq::run` like any PostgreSQL consumer,
//! so a build with idemq's `failpoints` feature stops at the same
//! failpoints as the DynamoDB probe (`tests/support/lambda_probe.rs`).

use std::time::Duration;

use idemq::HostError;
use idemq::store::postgres::{Effect, Sql};
use idemq::{Handler, JobError, JobMeta};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Ok,
    Sleep,
}

#[derive(Debug, Deserialize)]
pub struct ProbeJob {
    pub id: String,
    pub action: Action,
    #[serde(default)]
    pub ms: Option<u64>,
}

pub struct PgProbe {
    /// `INSERT … ON CONFLICT DO UPDATE SET n = n + 1` on the probe table.
    add_one: String,
}

impl PgProbe {
    fn new(schema: &str) -> Self {
        Self {
            add_one: format!(
                "INSERT INTO \"{schema}\".probe (id, n) VALUES ($1, 1) \
                 ON CONFLICT (id) DO UPDATE SET n = probe.n + 1"
            ),
        }
    }
}

impl Handler for PgProbe {
    type Job = ProbeJob;
    type Effect = Effect;

    async fn handle(&self, job: ProbeJob, _meta: JobMeta) -> Result<Effect, JobError> {
        if let Action::Sleep = job.action {
            tokio::time::sleep(Duration::from_millis(job.ms.unwrap_or(0))).await;
        }
        Ok(Effect::new().execute(Sql::new(self.add_one.clone()).bind(job.id)))
    }
}

/// The probe table, created if missing. Under an advisory lock: workers
/// starting together would otherwise collide in the catalogue.
fn table_sql(schema: &str) -> String {
    format!(
        "BEGIN;
SELECT pg_advisory_xact_lock(hashtext('idemq pg_probe table'));
CREATE TABLE IF NOT EXISTS \"{schema}\".probe (id text PRIMARY KEY, n bigint NOT NULL);
COMMIT;"
    )
}

/// Creates the probe table. The chaos suite may point the URL at a proxy
/// that cuts connections: a failed try is repeated, for up to a minute.
async fn create_table(schema: &str) -> Result<(), HostError> {
    let url = std::env::var("IDEMQ_POSTGRES_URL").or_else(|_| std::env::var("DATABASE_URL"))?;
    let sql = table_sql(schema);
    let mut tries = 0;
    loop {
        let attempt = async {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
            let connection = tokio::spawn(connection);
            client.batch_execute(&sql).await?;
            drop(client);
            let _ = connection.await;
            Ok::<(), tokio_postgres::Error>(())
        };
        match attempt.await {
            Ok(()) => return Ok(()),
            Err(e) if tries < 120 => {
                tries += 1;
                eprintln!("pg_probe: creating the probe table: {e}; trying again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), HostError> {
    let schema = std::env::var("IDEMQ_POSTGRES_SCHEMA")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "idemq".into());
    if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_none() {
        create_table(&schema).await?;
    }
    idemq::run(PgProbe::new(&schema)).await
}
