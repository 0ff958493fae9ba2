//! Connections of one execution environment: opened when first needed,
//! kept open between invocations, at most one per job running at a time
//! (a transaction owns its connection), and opened again when one breaks.
//!
//! A connection comes back to the pool only when the job that held it
//! ended its transaction cleanly ([`Conn::release`]); one dropped
//! mid-transaction (a job cut off by its deadline) is closed instead, and
//! the server rolls its transaction back.

use std::collections::HashMap;
use std::sync::Mutex;

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Config, NoTls, Statement};

use super::tls::Tls;

/// IAM database authentication: the region and the credentials each
/// connection's token is signed with ([`super::iam`]).
#[derive(Clone)]
pub(crate) struct IamAuth {
    pub(crate) region: String,
    pub(crate) credentials: SharedCredentialsProvider,
}

/// How to open a connection.
pub(crate) struct Connector {
    pub(crate) config: Config,
    pub(crate) tls: Option<Tls>,
    pub(crate) iam: Option<IamAuth>,
}

impl Connector {
    /// Opens a connection and starts the task that drives it.
    async fn open(&self) -> Result<Client, OpenError> {
        let mut config = self.config.clone();
        if let Some(iam) = &self.iam {
            let host = match config.get_hosts().first() {
                Some(Host::Tcp(h)) => h.clone(),
                _ => {
                    return Err(OpenError::Config(
                        "IAM authentication needs a TCP host".into(),
                    ));
                }
            };
            let port = config.get_ports().first().copied().unwrap_or(5432);
            let user = config
                .get_user()
                .ok_or_else(|| OpenError::Config("IAM authentication needs a user".into()))?
                .to_owned();
            let credentials =
                iam.credentials.provide_credentials().await.map_err(|e| {
                    OpenError::Config(format!("no AWS credentials to sign with: {e}"))
                })?;
            let token = super::iam::auth_token(
                &host,
                port,
                &user,
                &iam.region,
                credentials,
                crate::clock::now(),
            )
            .map_err(OpenError::Config)?;
            config.password(token);
        }
        let client = match (&self.tls, config.get_ssl_mode()) {
            (Some(tls), mode) if mode != SslMode::Disable => {
                let (client, connection) = config.connect(tls.clone()).await.map_err(tls_or)?;
                tokio::spawn(drive(connection));
                client
            }
            _ => {
                let (client, connection) = config.connect(NoTls).await?;
                tokio::spawn(drive(connection));
                client
            }
        };
        Ok(client)
    }
}

/// A connection error whose cause is the TLS handshake refusing the
/// server (an untrusted certificate, another host's name) as
/// [`OpenError::Tls`]: no retry mends it, only a setting does.
fn tls_or(e: tokio_postgres::Error) -> OpenError {
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        let tls = s.downcast_ref::<rustls::Error>().or_else(|| {
            s.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(tls) = tls {
            return OpenError::Tls(tls.to_string());
        }
        source = s.source();
    }
    OpenError::Postgres(e)
}

/// Runs a connection until it closes.
async fn drive<F: std::future::Future<Output = Result<(), tokio_postgres::Error>>>(connection: F) {
    if let Err(e) = connection.await {
        tracing::debug!(error = %e, "PostgreSQL connection closed");
    }
}

/// Why a connection could not be opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    /// The server or the network refused it.
    #[error("{0}")]
    Postgres(#[from] tokio_postgres::Error),
    /// The settings cannot make one.
    #[error("{0}")]
    Config(String),
    /// The TLS handshake refused the server.
    #[error("TLS: {0}")]
    Tls(String),
}

/// Statements a connection keeps prepared, at most (then it forgets them
/// all and starts again: a handler that builds its SQL text per job would
/// otherwise fill the server's memory).
const MAX_PREPARED: usize = 256;

/// A connection and the statements prepared on it.
pub(crate) struct Pooled {
    client: Client,
    prepared: HashMap<String, Statement>,
}

/// The environment's connections.
pub(crate) struct Pool {
    connector: Connector,
    idle: Mutex<Vec<Pooled>>,
    permits: Semaphore,
}

impl Pool {
    /// Up to `size` connections (at least one).
    pub(crate) fn new(connector: Connector, size: usize) -> Self {
        Self {
            connector,
            idle: Mutex::default(),
            permits: Semaphore::new(size.max(1)),
        }
    }

    /// A connection for one job: an idle one that is still open, or a new
    /// one; waits while `size` are in use.
    pub(crate) async fn get(&self) -> Result<Conn<'_>, OpenError> {
        let permit = self
            .permits
            .acquire()
            .await
            .expect("the pool's semaphore is never closed");
        let idle = loop {
            let next = self.idle.lock().expect("pool lock").pop();
            match next {
                Some(c) if c.client.is_closed() => continue,
                other => break other,
            }
        };
        let pooled = match idle {
            Some(c) => c,
            None => Pooled {
                client: self.connector.open().await?,
                prepared: HashMap::new(),
            },
        };
        Ok(Conn {
            pooled: Some(pooled),
            pool: self,
            reusable: false,
            _permit: permit,
        })
    }

    /// A new connection in place of one that broke (the idle ones, opened
    /// as long ago, are likely broken too: they are closed).
    pub(crate) async fn fresh(&self) -> Result<Conn<'_>, OpenError> {
        self.idle.lock().expect("pool lock").clear();
        self.get().await
    }
}

/// A connection held by one job.
pub(crate) struct Conn<'a> {
    pooled: Option<Pooled>,
    pool: &'a Pool,
    reusable: bool,
    _permit: SemaphorePermit<'a>,
}

impl Conn<'_> {
    pub(crate) fn client(&self) -> &Client {
        &self.pooled.as_ref().expect("held until dropped").client
    }

    /// Each of `wanted` (SQL text, parameter types) as a statement prepared
    /// on this connection, with its types, preparing those it lacks all at
    /// once (one round trip when any is missing, none otherwise). A
    /// failure names the index in `wanted` that caused it.
    pub(crate) async fn prepared(
        &mut self,
        wanted: &[(&str, Vec<Type>)],
    ) -> Result<Vec<Statement>, (usize, tokio_postgres::Error)> {
        let pooled = self.pooled.as_mut().expect("held until dropped");
        let mut missing: Vec<usize> = (0..wanted.len())
            .filter(|&i| !pooled.prepared.contains_key(wanted[i].0))
            .collect();
        if pooled.prepared.len() + missing.len() > MAX_PREPARED {
            pooled.prepared.clear();
            missing = (0..wanted.len()).collect();
        }
        let client = &pooled.client;
        let made = futures_util::future::join_all(
            missing
                .iter()
                .map(|&i| client.prepare_typed(wanted[i].0, &wanted[i].1)),
        )
        .await;
        for (i, made) in missing.into_iter().zip(made) {
            let statement = made.map_err(|e| (i, e))?;
            pooled.prepared.insert(wanted[i].0.to_owned(), statement);
        }
        Ok(wanted
            .iter()
            .map(|(text, _)| pooled.prepared[*text].clone())
            .collect())
    }

    /// The job is done with it, outside any transaction: it goes back to
    /// the pool.
    pub(crate) fn release(mut self) {
        self.reusable = true;
    }
}

impl Drop for Conn<'_> {
    fn drop(&mut self) {
        if let Some(pooled) = self.pooled.take()
            && self.reusable
            && !pooled.client.is_closed()
        {
            self.pool.idle.lock().expect("pool lock").push(pooled);
        }
    }
}
