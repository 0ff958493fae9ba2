//! The stores under test, each behind the same few effects: a counter that
//! only the marker keeps from counting a job twice, a write whose own
//! condition refuses it, and a write that loses an optimistic race.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use idemq::config::TableLayout;
use idemq::followup::FollowUp;
use idemq::store::dynamodb::DynamoDb;
use idemq::store::dynamodb::{Committer, Effect, Key, Write};
use idemq::store::postgres::{Postgres, PostgresConfig, Sql};
use idemq::store::{FailureRecords, Provision, Store};
pub use idemq::testing::store_suite::{Subject, SubjectEffect};

use crate::common::{number, sdk, unique};

pub const TTL: Duration = Duration::from_secs(21 * 24 * 3600);

pub type Eff<T> = SubjectEffect<T>;

/// DynamoDB on the local stack (moto), one fresh table per subject.
pub struct Dynamo {
    store: DynamoDb,
    ddb: aws_sdk_dynamodb::Client,
    layout: TableLayout,
}

impl Dynamo {
    pub async fn new() -> Self {
        let sdk = sdk().await;
        let layout = crate::common::fresh_table(&sdk).await;
        Self::over(aws_sdk_dynamodb::Client::new(&sdk), layout)
    }

    fn over(ddb: aws_sdk_dynamodb::Client, layout: TableLayout) -> Self {
        let committer = Committer::new(ddb.clone(), layout.clone(), TTL).with_marker_first(true);
        let records = idemq::store::dynamodb::FailureTable::new(ddb.clone(), layout.clone(), TTL);
        Self {
            store: DynamoDb::new(committer, records),
            ddb,
            layout,
        }
    }

    fn counter_key(name: &str) -> Key {
        Key::string("pk", format!("counter#{name}"))
    }
}

impl Subject for Dynamo {
    type Store = DynamoDb;

    async fn with_namespace(&self, namespace: &str) -> Self {
        let layout = self.layout.clone().with_namespace(namespace).unwrap();
        Self::over(self.ddb.clone(), layout)
    }

    fn store(&self) -> &DynamoDb {
        &self.store
    }

    fn records(&self) -> Arc<dyn FailureRecords> {
        Arc::new(idemq::store::dynamodb::FailureTable::new(
            self.ddb.clone(),
            self.layout.clone(),
            TTL,
        ))
    }

    fn add_one(&self, name: &str) -> Effect {
        Effect::new().with(
            Write::update(
                &self.layout.table_name,
                Self::counter_key(name),
                "ADD n :one",
            )
            .value(":one", AttributeValue::N("1".into())),
        )
    }

    fn refused(&self, name: &str) -> Effect {
        Effect::new().with(
            Write::update(
                &self.layout.table_name,
                Self::counter_key(name),
                "ADD n :one",
            )
            .condition("n >= :big")
            .value(":one", AttributeValue::N("1".into()))
            .value(":big", AttributeValue::N("1000".into())),
        )
    }

    fn stale(&self, name: &str) -> Effect {
        Effect::new().with(
            Write::update(
                &self.layout.table_name,
                Self::counter_key(name),
                "SET n = :n",
            )
            .condition("v = :v")
            .value(":n", AttributeValue::N("5".into()))
            .value(":v", AttributeValue::N("999".into()))
            .optimistic(),
        )
    }

    fn then_send(&self, effect: Effect, job: FollowUp) -> Effect {
        effect.then_send(job)
    }

    async fn counter(&self, name: &str) -> i64 {
        number(
            &self.ddb,
            &self.layout.table_name,
            &format!("counter#{name}"),
            "n",
        )
        .await
        .unwrap_or(0)
    }
}

/// PostgreSQL on the local stack's server, one fresh schema per subject
/// (created by the store's own provisioner) with a counters table beside
/// idemq's.
pub struct Pg {
    store: Postgres,
    client: Arc<tokio_postgres::Client>,
    schema: String,
    url: String,
    prepare: bool,
}

/// The stack's server as `host:port`, for a proxy in front of it.
pub fn upstream() -> String {
    let parsed: tokio_postgres::Config = postgres_url().parse().unwrap();
    match &parsed.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => format!("{h}:{}", parsed.get_ports()[0]),
        other => panic!("not a TCP host: {other:?}"),
    }
}

/// A connection string to the stack's database at `127.0.0.1:port` (a
/// proxy), naming the server `host` (what TLS checks), with `sslmode`.
pub fn conninfo_via(host: &str, port: u16, sslmode: &str) -> String {
    let parsed: tokio_postgres::Config = postgres_url().parse().unwrap();
    let password = String::from_utf8(parsed.get_password().unwrap().to_vec()).unwrap();
    format!(
        "host={host} hostaddr=127.0.0.1 port={port} user={} password={password} dbname={} sslmode={sslmode}",
        parsed.get_user().unwrap(),
        parsed.get_dbname().unwrap()
    )
}

/// Commits `effect` on `store` for job `id` (payload `{}`, queue `orders`).
pub async fn commit_on<S: Store>(
    store: &S,
    id: &str,
    effect: &S::Effect,
) -> Result<idemq::store::CommitOutcome, idemq::store::CommitError> {
    let job = idemq::job::JobId::new(id).unwrap();
    let hash = idemq::job::PayloadHash::of(b"{}");
    let job = idemq::store::JobRef {
        id: &job,
        payload_hash: &hash,
        queue: "orders",
    };
    store.commit(job, effect).await.map(|s| s.outcome)
}

pub fn postgres_url() -> String {
    std::env::var("IDEMQ_POSTGRES_URL").expect(
        "IDEMQ_POSTGRES_URL is not set: run these tests with `make test`, or `make stack-up` \
         and `set -a; . .state/stack.env; set +a` first",
    )
}

impl Pg {
    pub async fn new() -> Self {
        Self::with(false).await
    }

    /// A subject whose store prepares each statement once per connection.
    pub async fn prepared() -> Self {
        Self::with(true).await
    }

    async fn with(prepare: bool) -> Self {
        let url = postgres_url();
        let schema = unique("suite").replace('-', "_");
        let store = Self::store_for(&url, &schema, None, prepare);
        let created = store.schema().provision(&mut Vec::new()).await.unwrap();
        assert!(created.created, "{created:?}");
        let again = store.schema().provision(&mut Vec::new()).await.unwrap();
        assert!(
            !again.created,
            "provisioning twice changes nothing: {again:?}"
        );
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
            .batch_execute(&format!(
                "CREATE TABLE \"{schema}\".counters (name text PRIMARY KEY, n bigint NOT NULL, v bigint NOT NULL DEFAULT 0)"
            ))
            .await
            .unwrap();
        Self {
            store,
            client: Arc::new(client),
            schema,
            url,
            prepare,
        }
    }

    fn store_for(url: &str, schema: &str, namespace: Option<&str>, prepare: bool) -> Postgres {
        let mut config = PostgresConfig::new(url)
            .with_schema(schema)
            .unwrap()
            .with_marker_ttl(TTL)
            .with_pool_size(8)
            .with_prepared_statements(prepare)
            // Expired rows are deleted when a test says so.
            .with_sweep_every(None);
        if let Some(ns) = namespace {
            config = config.with_namespace(ns).unwrap();
        }
        Postgres::new(config).unwrap()
    }

    /// A raw connection to the server, for what the store does not do.
    pub fn client(&self) -> &tokio_postgres::Client {
        &self.client
    }

    pub fn schema(&self) -> &str {
        &self.schema
    }
}

impl Subject for Pg {
    type Store = Postgres;

    async fn with_namespace(&self, namespace: &str) -> Self {
        Self {
            store: Self::store_for(&self.url, &self.schema, Some(namespace), self.prepare),
            client: Arc::clone(&self.client),
            schema: self.schema.clone(),
            url: self.url.clone(),
            prepare: self.prepare,
        }
    }

    fn store(&self) -> &Postgres {
        &self.store
    }

    fn records(&self) -> Arc<dyn FailureRecords> {
        self.store.failure_records()
    }

    fn add_one(&self, name: &str) -> idemq::store::postgres::Effect {
        idemq::store::postgres::Effect::new().execute(
            Sql::new(format!(
                "INSERT INTO \"{}\".counters (name, n) VALUES ($1, 1) \
                 ON CONFLICT (name) DO UPDATE SET n = counters.n + 1",
                self.schema
            ))
            .bind(name.to_owned()),
        )
    }

    fn refused(&self, name: &str) -> idemq::store::postgres::Effect {
        idemq::store::postgres::Effect::new().execute(
            Sql::new(format!(
                "UPDATE \"{}\".counters SET n = n + 1 WHERE name = $1 AND n >= 1000",
                self.schema
            ))
            .bind(name.to_owned())
            .expect_rows(1),
        )
    }

    fn stale(&self, name: &str) -> idemq::store::postgres::Effect {
        idemq::store::postgres::Effect::new().execute(
            Sql::new(format!(
                "UPDATE \"{}\".counters SET n = 5 WHERE name = $1 AND v = 999",
                self.schema
            ))
            .bind(name.to_owned())
            .optimistic(1),
        )
    }

    fn then_send(
        &self,
        effect: idemq::store::postgres::Effect,
        job: FollowUp,
    ) -> idemq::store::postgres::Effect {
        effect.then_send(job)
    }

    async fn counter(&self, name: &str) -> i64 {
        self.client
            .query_opt(
                &format!("SELECT n FROM \"{}\".counters WHERE name = $1", self.schema),
                &[&name],
            )
            .await
            .unwrap()
            .map_or(0, |r| r.get(0))
    }
}

/// Commits `effect` for job `id` with payload `body` from `queue`.
pub async fn commit<T: Subject>(
    t: &T,
    queue: &str,
    id: &str,
    body: &str,
    effect: &Eff<T>,
) -> idemq::store::Settled {
    let job = idemq::job::JobId::new(id).unwrap();
    let hash = idemq::job::PayloadHash::of(body.as_bytes());
    let job = idemq::store::JobRef {
        id: &job,
        payload_hash: &hash,
        queue,
    };
    t.store().commit(job, effect).await.expect("commit")
}
