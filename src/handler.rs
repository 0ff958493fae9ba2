//! The user's side of the contract: a [`Handler`] receives a decoded job and
//! returns its [`Effect`](Handler::Effect), or a [`JobError`] that says whether to retry.

use std::backtrace::Backtrace;
use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

// Instants and sleeps come from tokio's clock, the one clock a test (or a
// simulation) can pause and advance.
use tokio::time::Instant;

use serde::de::DeserializeOwned;

use crate::job::JobId;

/// Any error a handler wants to report, with its source chain.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Retry intent as a type. `classify` turns it into what SQS does.
///
/// `?` turns any error (`E: std::error::Error + Send + Sync + 'static`: an
/// SDK error, `std::io::Error`, `serde_json::Error`, your own) into a
/// **transient** `JobError`, the safe default: the job is retried with
/// backoff and, once SQS's redrive gives up, dead-lettered with its error
/// chain. Trying again being useless is something only the handler knows,
/// so a permanent failure is always explicit: [`JobError::permanent`].
///
/// The error keeps its cause as a boxed error, not as text, so the failure
/// record lists the whole `source()` chain. `JobError` itself does not
/// implement `std::error::Error` (the `anyhow::Error` pattern): that is what
/// lets `From` cover every error type. Its cause is
/// [`source_error`](JobError::source_error) /
/// [`into_source`](JobError::into_source).
///
/// ```
/// use idemq::{Handler, JobError, JobMeta};
/// use idemq::store::dynamodb::Effect;
///
/// struct Import;
///
/// impl Handler for Import {
///     type Job = String;
///     type Effect = Effect;
///
///     async fn handle(&self, path: String, _meta: JobMeta) -> Result<Effect, JobError> {
///         let text = std::fs::read_to_string(&path)?; // transient: retried
///         let n: u64 = text.trim().parse().map_err(JobError::permanent)?; // DLQ now
///         let _ = n;
///         Ok(Effect::new())
///     }
/// }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum JobError {
    /// Try again later: with jittered exponential backoff, or after
    /// `retry_after` when the handler knows better (a `Retry-After` header).
    #[non_exhaustive]
    Transient {
        /// What went wrong, with its own `source()` chain.
        source: BoxError,
        /// The handler's own delay before the next attempt.
        retry_after: Option<Duration>,
        /// Where the error was made ([`JobError::backtrace`]).
        backtrace: Option<Box<Backtrace>>,
    },
    /// Trying again cannot help (bad input, a business rule): the job goes
    /// to the DLQ now, with its context.
    #[non_exhaustive]
    Permanent {
        /// What went wrong, with its own `source()` chain.
        source: BoxError,
        /// Where the error was made ([`JobError::backtrace`]).
        backtrace: Option<Box<Backtrace>>,
    },
}

/// `?` on any error: a transient failure, retried with backoff.
impl<E> From<E> for JobError
where
    E: std::error::Error + Send + Sync + 'static,
{
    fn from(error: E) -> Self {
        Self::transient(error)
    }
}

impl JobError {
    /// Try again later, with jittered exponential backoff.
    pub fn transient(source: impl Into<BoxError>) -> Self {
        Self::Transient {
            source: source.into(),
            retry_after: None,
            backtrace: crate::backtrace::capture(),
        }
    }

    /// Try again after `after` (clamped to what SQS allows), instead of the
    /// backoff.
    pub fn retry_after(source: impl Into<BoxError>, after: Duration) -> Self {
        Self::Transient {
            source: source.into(),
            retry_after: Some(after),
            backtrace: crate::backtrace::capture(),
        }
    }

    /// Trying again cannot help: dead-letter the job now.
    pub fn permanent(source: impl Into<BoxError>) -> Self {
        Self::Permanent {
            source: source.into(),
            backtrace: crate::backtrace::capture(),
        }
    }

    /// Whether the job is dead-lettered at once rather than retried.
    pub fn is_permanent(&self) -> bool {
        matches!(self, Self::Permanent { .. })
    }

    /// The error the handler reported (its `source()` chain included).
    pub fn source_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        match self {
            Self::Transient { source, .. } | Self::Permanent { source, .. } => source.as_ref(),
        }
    }

    /// Where the error was made: captured by the constructor (and so by
    /// `?`) when `IDEMQ_BACKTRACE` says so
    /// ([`BacktraceMode`](crate::failure::BacktraceMode); on by
    /// default). The failure record and the dead letter keep it, the
    /// frames of your code first.
    pub fn backtrace(&self) -> Option<&Backtrace> {
        match self {
            Self::Transient { backtrace, .. } | Self::Permanent { backtrace, .. } => {
                backtrace.as_deref()
            }
        }
    }

    /// The error the handler reported, owned.
    pub fn into_source(self) -> BoxError {
        match self {
            Self::Transient { source, .. } | Self::Permanent { source, .. } => source,
        }
    }
}

impl std::fmt::Display for JobError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Transient { source, .. } => write!(f, "transient: {source}"),
            Self::Permanent { source, .. } => write!(f, "permanent: {source}"),
        }
    }
}

/// What a handler knows about the job besides its payload.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct JobMeta {
    /// The job's id (attribute, body pointer or `MessageId`).
    pub job_id: JobId,
    /// 1 on the first delivery (`ApproximateReceiveCount`).
    pub attempt: u32,
    /// The source queue's name.
    pub queue: String,
    /// The consumer's namespace: `IDEMQ_NAMESPACE`, else the queue's name
    /// ([`TableLayout::namespace_for`](crate::config::TableLayout::namespace_for)).
    pub namespace: String,
    /// The source queue's URL (a follow-up to the same queue goes there:
    /// [`crate::followup`]).
    pub queue_url: String,
    /// SQS's `MessageId` of this delivery.
    pub message_id: String,
    /// When the host must have answered (the Lambda deadline, or the
    /// worker's visibility timeout).
    pub deadline: Instant,
}

impl JobMeta {
    /// A deterministic idempotency key for a side effect outside DynamoDB,
    /// in this consumer's namespace: see [`JobId::downstream_key_in`]
    /// ([`JobId::downstream_key`] is the key without a namespace that
    /// earlier versions returned here).
    pub fn downstream_key(&self, step: &str) -> String {
        self.job_id.downstream_key_in(&self.namespace, step)
    }
}

/// A job handler. Implement it, or wrap an async closure with
/// [`handler_fn`].
///
/// [`Effect`](Self::Effect) names the store its results commit to: a
/// DynamoDB handler returns [`crate::store::dynamodb::Effect`] (DynamoDB's writes), a
/// PostgreSQL handler `idemq::store::postgres::Effect` (SQL statements). A host
/// runs a handler only on a store of that effect ([`crate::store`]).
pub trait Handler: Send + Sync + 'static {
    /// The job payload, decoded from the message body as JSON. A body that
    /// does not decode is a permanent error, sent to the DLQ.
    type Job: DeserializeOwned + Send + 'static;

    /// What a job's result is, in its store's terms: `idemq::store::dynamodb::Effect` on
    /// DynamoDB, `idemq::store::postgres::Effect` on PostgreSQL.
    type Effect: Send + Sync + 'static;

    /// Handles one job: its effect is committed with the dedup marker in
    /// one transaction of the store; an `Err` says whether to retry
    /// ([`JobError`]).
    /// Called again for every delivery that finds no marker, so it must not
    /// have side effects outside the effect (or must key them with
    /// [`JobMeta::downstream_key`]).
    fn handle(
        &self,
        job: Self::Job,
        meta: JobMeta,
    ) -> impl Future<Output = Result<Self::Effect, JobError>> + Send;

    /// Whether a job's marker is read before this handler runs
    /// ([`LookUp`]). The default, [`LookUp::BeforeHandler`], is the safe
    /// choice for a handler that acts outside its effect; a handler whose
    /// every effect is in its `Effect` says [`LookUp::NotNeeded`] and
    /// saves the read.
    fn look_up(&self) -> LookUp {
        LookUp::BeforeHandler
    }
}

/// What the read of a job's marker before its handler buys, as the handler
/// declares it ([`Handler::look_up`]).
///
/// The commit alone makes a job's *effect* apply once: a second delivery's
/// marker write is refused and none of its effect applies. What the
/// commit cannot undo is what the handler did *outside* its effect while
/// it ran (a card charged, an e-mail sent, an HTTP call): only a handler
/// that does not run again for a job already committed is safe there, and
/// that is what the look-up buys. It costs one read per batch (on DynamoDB
/// a consistent `BatchGetItem`, a tenth of a request per job at batch 10,
/// and one read unit per job; on PostgreSQL one `SELECT` round trip).
///
/// The look-up reads the job's own marker key. A
/// [fused](crate::store::dynamodb::Effect::marked_by) marker is the user's item, whose key
/// idemq learns only from the effect, so the look-up cannot find it: a
/// handler with a fused marker gains nothing from it either.
/// `IDEMQ_READ_MARKER_FIRST=false` turns the look-up off for every
/// handler of a deployment, whatever they declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LookUp {
    /// Read the marker before the handler runs, and settle a job already
    /// committed without running it (the default: the handler may act
    /// outside its effect).
    #[default]
    BeforeHandler,
    /// Run the handler without reading first: every effect of this
    /// handler is in its `Effect` (so a duplicate's commit is refused and
    /// nothing is repeated), or its marker is fused.
    NotNeeded,
}

/// A [`Handler`] made from an async closure.
///
/// ```
/// use idemq::{handler_fn, JobError, JobMeta};
/// use idemq::store::dynamodb::Effect;
///
/// #[derive(serde::Deserialize)]
/// struct Ping { n: u32 }
///
/// let handler = handler_fn(|job: Ping, _meta: JobMeta| async move {
///     if job.n == 0 {
///         return Err(JobError::permanent("n must be positive"));
///     }
///     Ok(Effect::new())
/// });
/// # let _ = handler;
/// ```
pub fn handler_fn<J, E, F, Fut>(f: F) -> HandlerFn<F, J>
where
    J: DeserializeOwned + Send + 'static,
    E: Send + Sync + 'static,
    F: Fn(J, JobMeta) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<E, JobError>> + Send,
{
    HandlerFn {
        f,
        look_up: LookUp::BeforeHandler,
        _job: PhantomData,
    }
}

/// See [`handler_fn`].
pub struct HandlerFn<F, J> {
    f: F,
    look_up: LookUp,
    _job: PhantomData<fn(J)>,
}

impl<F, J> HandlerFn<F, J> {
    /// The same handler, declaring what the look-up before it buys
    /// ([`Handler::look_up`]; default [`LookUp::BeforeHandler`]).
    pub fn with_look_up(mut self, look_up: LookUp) -> Self {
        self.look_up = look_up;
        self
    }
}

impl<J, E, F, Fut> Handler for HandlerFn<F, J>
where
    J: DeserializeOwned + Send + 'static,
    E: Send + Sync + 'static,
    F: Fn(J, JobMeta) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<E, JobError>> + Send,
{
    type Job = J;
    type Effect = E;

    fn handle(&self, job: J, meta: JobMeta) -> impl Future<Output = Result<E, JobError>> + Send {
        (self.f)(job, meta)
    }

    fn look_up(&self) -> LookUp {
        self.look_up
    }
}
