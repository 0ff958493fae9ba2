//! A fault proxy for the PostgreSQL wire protocol, in the test process:
//! workers connect to it (their `IDEMQ_POSTGRES_URL` is [`PgProxy::url`])
//! and it relays their connections to the stack's server, cutting them as
//! [`Faults`] says:
//!
//! - `request`: a chunk from the client is dropped and the connection cut
//!   (the server never sees it: a transaction cut before `COMMIT` is
//!   rolled back);
//! - `answer`: a chunk from the server is dropped and the connection cut;
//! - `after_commit`: a chunk holding a `COMMIT` query is forwarded, and
//!   the connection is cut before the answer reaches the client: the
//!   server may well have committed, and the client cannot know. The
//!   proxy waits (up to 300 ms) for the server's answer and counts a
//!   `CommandComplete` tagged `COMMIT` it swallowed: a commit that took
//!   effect and whose answer was lost;
//! - [`PgProxy::set_outage`]: every connection is cut at once, and new
//!   ones are closed as soon as they are accepted, until it ends.
//!
//! Every fault is counted ([`PgProxy::stats`]), so a test asserts that it
//! happened.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The chances of each cut, per chunk relayed.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    /// A client chunk dropped, the connection cut.
    pub request: f64,
    /// A server chunk dropped, the connection cut.
    pub answer: f64,
    /// A client chunk holding `COMMIT` forwarded, then the connection cut
    /// before the answer.
    pub after_commit: f64,
}

/// What the proxy did.
#[derive(Debug, Default)]
pub struct Stats {
    pub connections: AtomicU64,
    pub cut_request: AtomicU64,
    pub cut_answer: AtomicU64,
    pub cut_after_commit: AtomicU64,
    /// Of `cut_after_commit`: the server answered `COMMIT` (the
    /// transaction took effect) and the answer was dropped.
    pub commit_answer_dropped: AtomicU64,
    /// Connections cut when an outage began.
    pub outage_cut: AtomicU64,
    /// Connections closed on arrival during an outage.
    pub outage_refused: AtomicU64,
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        write!(
            f,
            "connections {}, cut: request {}, answer {}, after COMMIT {} (answer to a COMMIT that took effect dropped: {}), outage: cut {}, refused {}",
            n(&self.connections),
            n(&self.cut_request),
            n(&self.cut_answer),
            n(&self.cut_after_commit),
            n(&self.commit_answer_dropped),
            n(&self.outage_cut),
            n(&self.outage_refused),
        )
    }
}

/// The proxy's settings, changed while it runs.
#[derive(Clone, Copy, Debug, Default)]
struct Control {
    faults: Faults,
    outage: bool,
}

/// A running proxy; stops accepting when dropped.
pub struct PgProxy {
    port: u16,
    upstream: tokio_postgres::Config,
    control: watch::Sender<Control>,
    pub stats: Arc<Stats>,
    accept: JoinHandle<()>,
}

impl PgProxy {
    /// A proxy to the server of `url` (libpq's URL form), relaying
    /// everything until [`PgProxy::set_faults`] or
    /// [`PgProxy::set_outage`] says otherwise.
    pub async fn start(url: &str) -> Self {
        let upstream: tokio_postgres::Config = url.parse().unwrap();
        let host = match &upstream.get_hosts()[0] {
            tokio_postgres::config::Host::Tcp(h) => h.clone(),
            other => panic!("the chaos proxy needs a TCP host, not {other:?}"),
        };
        let port = upstream.get_ports().first().copied().unwrap_or(5432);
        let server = format!("{host}:{port}");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (control, watching) = watch::channel(Control::default());
        let stats = Arc::new(Stats::default());
        let accept = tokio::spawn(accept_loop(listener, server, watching, Arc::clone(&stats)));
        Self {
            port,
            upstream,
            control,
            stats,
            accept,
        }
    }

    pub fn set_faults(&self, faults: Faults) {
        self.control.send_modify(|c| c.faults = faults);
    }

    pub fn set_outage(&self, outage: bool) {
        self.control.send_modify(|c| c.outage = outage);
    }

    /// The server's connection string with the proxy as its host.
    pub fn url(&self) -> String {
        let c = &self.upstream;
        let mut url = format!(
            "host=127.0.0.1 port={} sslmode=disable user={}",
            self.port,
            c.get_user().unwrap_or("postgres")
        );
        if let Some(pw) = c.get_password() {
            url += &format!(" password={}", String::from_utf8_lossy(pw));
        }
        if let Some(db) = c.get_dbname() {
            url += &format!(" dbname={db}");
        }
        url
    }
}

impl Drop for PgProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    server: String,
    control: watch::Receiver<Control>,
    stats: Arc<Stats>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        stats.connections.fetch_add(1, Ordering::Relaxed);
        if control.borrow().outage {
            stats.outage_refused.fetch_add(1, Ordering::Relaxed);
            drop(client);
            continue;
        }
        let (server, control, stats) = (server.clone(), control.clone(), Arc::clone(&stats));
        tokio::spawn(async move {
            if let Ok(upstream) = TcpStream::connect(&server).await {
                relay(client, upstream, control, stats).await;
            }
        });
    }
}

fn chance(p: f64) -> bool {
    p > 0.0 && rand::random::<f64>() < p
}

fn holds(chunk: &[u8], needle: &[u8]) -> bool {
    chunk.windows(needle.len()).any(|w| w == needle)
}

/// Relays one connection until either side closes or a fault cuts it
/// (both sockets are dropped on return).
async fn relay(
    client: TcpStream,
    server: TcpStream,
    mut control: watch::Receiver<Control>,
    stats: Arc<Stats>,
) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let mut up = vec![0u8; 64 * 1024];
    let mut down = vec![0u8; 64 * 1024];
    loop {
        tokio::select! {
            read = cr.read(&mut up) => {
                let n = match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                let c = *control.borrow();
                if c.outage {
                    stats.outage_cut.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                if chance(c.faults.request) {
                    stats.cut_request.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                // A simple query (`Q`) whose text is exactly `COMMIT`.
                let commit = holds(&up[..n], b"COMMIT\0");
                if sw.write_all(&up[..n]).await.is_err() {
                    return;
                }
                if commit && chance(c.faults.after_commit) {
                    stats.cut_after_commit.fetch_add(1, Ordering::Relaxed);
                    // The server's answers from here on are read and
                    // dropped, until its COMMIT's tag or 300 ms.
                    let swallowed = tokio::time::timeout(Duration::from_millis(300), async {
                        loop {
                            match sr.read(&mut down).await {
                                Ok(0) | Err(_) => return false,
                                Ok(n) if holds(&down[..n], b"C\0\0\0\x0bCOMMIT\0") => return true,
                                Ok(_) => {}
                            }
                        }
                    })
                    .await;
                    if swallowed == Ok(true) {
                        stats.commit_answer_dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    return;
                }
            }
            read = sr.read(&mut down) => {
                let n = match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                let c = *control.borrow();
                if c.outage {
                    stats.outage_cut.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                if chance(c.faults.answer) {
                    stats.cut_answer.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                if cw.write_all(&down[..n]).await.is_err() {
                    return;
                }
            }
            changed = control.changed() => {
                if changed.is_err() {
                    return;
                }
                if control.borrow_and_update().outage {
                    stats.outage_cut.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        }
    }
}
