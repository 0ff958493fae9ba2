//! The PostgreSQL side of the chaos suite: the probe worker
//! (tests/support/pg_probe.rs), a fresh schema per scenario, and the
//! checker over the probe's counter rows.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use idemq::init::InitReport;
use idemq::store::Provision;
use idemq::store::postgres::{Postgres, PostgresConfig};

use crate::common::unique;
use crate::harness::check::{Report, dead_letters, tally};

/// The PostgreSQL probe built with failpoints: `CHAOS_PG_PROBE`, set by
/// scripts/chaos.sh.
pub fn pg_probe() -> PathBuf {
    let p = PathBuf::from(std::env::var("CHAOS_PG_PROBE").expect(
        "CHAOS_PG_PROBE is not set: run the chaos suite with `make test-chaos` (scripts/chaos.sh builds the PostgreSQL probe with failpoints)",
    ));
    assert!(p.exists(), "{} does not exist", p.display());
    p
}

/// The stack's server (`IDEMQ_POSTGRES_URL`, from .state/stack.env).
pub fn postgres_url() -> String {
    std::env::var("IDEMQ_POSTGRES_URL").expect(
        "IDEMQ_POSTGRES_URL is not set: run the chaos suite with `make test-chaos` (the local stack's PostgreSQL)",
    )
}

/// A fresh schema with idemq's tables, for one scenario.
pub struct PgSchema {
    pub url: String,
    pub name: String,
    client: tokio_postgres::Client,
}

impl PgSchema {
    /// Creates idemq's tables in a new schema through the store's own
    /// provisioner (what `idemq init --store postgres` runs).
    pub async fn fresh() -> Self {
        let url = postgres_url();
        let name = unique("chaos").replace('-', "_");
        let store = Postgres::new(PostgresConfig::new(&url).with_schema(&name).unwrap()).unwrap();
        let made = store.schema().provision(&mut Vec::new()).await.unwrap();
        assert!(made.created, "{made:?}");
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        Self { url, name, client }
    }

    /// The workers' settings: this schema, reached at `url` (the server,
    /// or a proxy in front of it).
    pub fn worker_env(&self, url: &str) -> Vec<(String, String)> {
        vec![
            ("IDEMQ_POSTGRES_URL".into(), url.to_owned()),
            ("IDEMQ_POSTGRES_SCHEMA".into(), self.name.clone()),
        ]
    }

    /// The probe's counter per job id (its table is made by the probe
    /// when it starts).
    pub async fn counts(&self) -> HashMap<String, i64> {
        let sql = format!("SELECT id, n FROM \"{}\".probe", self.name);
        let rows = self.client.query(&sql, &[]).await.unwrap();
        rows.iter().map(|r| (r.get(0), r.get(1))).collect()
    }

    /// Markers committed in this schema.
    pub async fn markers(&self) -> i64 {
        self.client
            .query_one(
                &format!("SELECT count(*) FROM \"{}\".markers", self.name),
                &[],
            )
            .await
            .unwrap()
            .get(0)
    }
}

/// The checker for the PostgreSQL probe: per sent job id, its counter row
/// and its DLQ copies; and rows of ids never sent.
pub async fn check_pg(
    sdk: &aws_config::SdkConfig,
    res: &InitReport,
    pg: &PgSchema,
    sent: &HashSet<String>,
) -> Report {
    let counts = pg.counts().await;
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let dead = dead_letters(&sqs, &res.dlq_url).await;
    tally(&counts, &dead, sent)
}
