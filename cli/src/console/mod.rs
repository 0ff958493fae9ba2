//! `idemq console`: the dead letters of one or more consumers in a
//! browser. Why each job died (grouped by cause), a search by job id,
//! error, time or a field of the payload, one letter's whole context, and
//! redrive, delete and export of what a search matches, each after a dry
//! run and with an audit record.
//!
//! One file per concern: [`snapshot`] (reading a DLQ once for every page,
//! groups, the search), [`metrics`] (retries and the source queues' oldest
//! message, from CloudWatch), [`guard`] (who may ask: the secret token, the
//! session cookie, CSRF), [`actions`] (dry runs, runs as background
//! tasks, the audit file), [`pages`] (the HTML). This file holds the
//! command's arguments, the routes and the server.
//!
//! Safe by default: it listens on loopback only, answers only a browser
//! that opened the address it printed (which carries a secret), refuses
//! every action unless started with `--allow`, shows no payload unless
//! started with `--show-payloads`, and logs no payload bytes.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use idemq::dlq::peek::Peek;
use idemq::dlq::redrive::Rate;
use idemq::horizon::ReplayHorizon;

use crate::dlq::{Common, consumer};
use crate::{StoreKind, usage_error};

mod actions;
mod guard;
mod metrics;
mod pages;
mod snapshot;

use actions::{Action, Tasks};
use guard::Guard;
use metrics::Watch;
use snapshot::{Consumer, Search};

#[derive(Debug, clap::Args)]
pub struct ConsoleArgs {
    /// A consumer by its Lambda function (name, ARN or NAME:ALIAS), as
    /// `idemq dlq --function` reads it; repeat for several consumers.
    #[arg(long = "function", value_name = "NAME_OR_ARN")]
    functions: Vec<String>,
    /// A consumer by its settings in a file (KEY=VALUE lines or a JSON
    /// object, IDEMQ_DLQ_URL included), as `idemq dlq --env-file` reads
    /// it; repeat for several consumers. Without --function and
    /// --env-file: one consumer, from the flags below and this shell's
    /// IDEMQ_* environment.
    #[arg(long = "env-file", value_name = "FILE")]
    env_files: Vec<PathBuf>,
    /// The dead-letter queue [default: IDEMQ_DLQ_URL, or the function's].
    #[arg(long, conflicts_with_all = ["functions", "env_files"])]
    dlq_url: Option<String>,
    /// The idemq table, for failure records [default: IDEMQ_TABLE].
    #[arg(long, conflicts_with_all = ["functions", "env_files"])]
    table: Option<String>,
    /// Where the consumer keeps its failure records [default: dynamodb].
    #[arg(long, value_enum, conflicts_with_all = ["functions", "env_files"])]
    store: Option<StoreKind>,
    /// Seconds each message stays invisible while the DLQ is read; each
    /// is made visible again as soon as the read ends (1 to 43200).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=43_200))]
    hold_secs: u64,
    /// Where to listen: a loopback address (127.0.0.1:0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:7878")]
    listen: SocketAddr,
    /// Actions allowed, comma-separated: redrive, delete, export. Without
    /// it the console is read-only.
    #[arg(long, value_enum, value_delimiter = ',')]
    allow: Vec<Action>,
    /// Show payloads on the letter page (they may hold personal data).
    #[arg(long)]
    show_payloads: bool,
    /// The audit file: one JSON object per action, appended [default:
    /// .idemq/console-audit.jsonl]. Deleted letters are archived beside it.
    #[arg(long, default_value = ".idemq/console-audit.jsonl")]
    audit: PathBuf,
    /// How old (seconds) a DLQ's snapshot may be before a page reads the
    /// DLQ again; each page also has a link that reads it now.
    #[arg(long, default_value_t = 30)]
    refresh_secs: u64,
}

/// What every request handler shares.
pub(crate) struct App {
    pub consumers: Vec<Consumer>,
    pub guard: Guard,
    pub allowed: Vec<Action>,
    pub show_payloads: bool,
    pub max_age: Duration,
    pub audit: actions::Audit,
    pub tasks: Tasks,
}

impl App {
    /// The consumer named `name`, or the page saying there is none (404).
    fn consumer(&self, name: &str) -> Result<&Consumer, Box<Response>> {
        self.consumers
            .iter()
            .find(|c| c.name == name)
            .ok_or_else(|| {
                Box::new(pages::error(
                    Some(self),
                    StatusCode::NOT_FOUND,
                    &format!("no consumer {name}"),
                ))
            })
    }
}

type Shared = Arc<App>;

pub async fn run(args: ConsoleArgs, sdk: &aws_config::SdkConfig) -> ExitCode {
    if !args.listen.ip().is_loopback() {
        return usage_error(&format!(
            "--listen {}: the console listens on loopback only (127.0.0.1, ::1); reach it from \
             elsewhere through an SSH tunnel",
            args.listen
        ));
    }
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let cloudwatch = aws_sdk_cloudwatch::Client::new(sdk);
    // Each consumer's settings: a function's, a file's, or (neither given)
    // this shell's.
    let mut sources: Vec<(Option<String>, Option<PathBuf>)> = args
        .functions
        .iter()
        .map(|f| (Some(f.clone()), None))
        .chain(args.env_files.iter().map(|p| (None, Some(p.clone()))))
        .collect();
    if sources.is_empty() {
        sources.push((None, None));
    }
    let mut consumers = Vec::new();
    for (function, env_file) in sources {
        let common = Common {
            function: function.clone(),
            env_file: env_file.clone(),
            dlq_url: args.dlq_url.clone(),
            table: args.table.clone(),
            store: args.store,
            hold_secs: args.hold_secs,
        };
        let wanted = consumer::Wanted {
            function: function.clone(),
            env_file,
            dlq_url: args.dlq_url.clone(),
            needs_dlq: true,
            table: args.table.clone(),
            store: args.store,
            source_queue: false,
        };
        let settled = match consumer::resolve(wanted, sdk, &sqs).await {
            Ok(c) => c,
            Err(code) => return code,
        };
        let (resolver, horizon) = match settled.env.behaviour() {
            Ok(c) => (c.job_id, ReplayHorizon::new(c.marker_ttl)),
            Err(e) => return usage_error(&e.to_string()),
        };
        let ctx = match crate::dlq::open(&settled, &common, false, (resolver, horizon), sdk).await {
            Ok(ctx) => ctx,
            Err(code) => return code,
        };
        let sources = ctx
            .dlq
            .source_queue_urls()
            .iter()
            .map(|url| Peek::new(sqs.clone(), url, Duration::from_secs(args.hold_secs)))
            .collect();
        let name = function
            .or_else(|| ctx.dlq.source_queues().first().cloned())
            .unwrap_or_else(|| "dlq".to_owned());
        if consumers.iter().any(|c: &Consumer| c.name == name) {
            return usage_error(&format!("{name} is named twice"));
        }
        let watch = Watch::new(cloudwatch.clone(), ctx.dlq.source_queues().to_vec());
        consumers.push(Consumer::new(name, ctx, sources, watch));
    }
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("idemq console: cannot listen on {}: {e}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("idemq console: {e}");
            return ExitCode::FAILURE;
        }
    };
    let guard = Guard::new(format!("http://{addr}"));
    let url = format!("http://{addr}/?token={}", guard.token());
    let app = Arc::new(App {
        consumers,
        guard,
        allowed: args.allow,
        show_payloads: args.show_payloads,
        max_age: Duration::from_secs(args.refresh_secs),
        audit: actions::Audit::new(args.audit),
        tasks: Tasks::default(),
    });
    let allowed: Vec<&str> = app.allowed.iter().map(|a| a.name()).collect();
    eprintln!(
        "idemq console: {} consumer(s): {}; {}; payloads {}",
        app.consumers.len(),
        app.consumers
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        if allowed.is_empty() {
            "read-only".to_owned()
        } else {
            format!("actions allowed: {}", allowed.join(", "))
        },
        if app.show_payloads { "shown" } else { "hidden" },
    );
    // The one line on stdout: the address to open, with its secret.
    println!("idemq console: {url}");
    let router = routes(app);
    let served = axum::serve(listener, router)
        .with_graceful_shutdown(shutdown())
        .await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("idemq console: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn shutdown() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

fn routes(app: Shared) -> Router {
    Router::new()
        .route("/", get(overview))
        .route("/api/overview", get(overview_json))
        .route("/audit", get(audit))
        .route("/c/{consumer}/letters", get(letters))
        .route("/c/{consumer}/letter/{id}", get(letter))
        .route("/c/{consumer}/preview/{action}", post(preview))
        .route("/c/{consumer}/run/{action}", post(start))
        .route("/tasks/{id}", get(task))
        .route("/tasks/{id}/download", get(download))
        .fallback(not_found)
        .with_state(app)
}

type Params = Query<HashMap<String, String>>;

/// The session's check, then the page; a first visit with the token is
/// answered with the cookie and a redirect to the same page without it.
fn gate(app: &App, headers: &HeaderMap, path: &str, params: &Params) -> Option<Response> {
    if let Some(token) = params.get("token") {
        if app.guard.token_matches(token) {
            let query: Vec<String> = params
                .iter()
                .filter(|(k, _)| k.as_str() != "token")
                .map(|(k, v)| format!("{}={}", pages::url_encode(k), pages::url_encode(v)))
                .collect();
            let to = if query.is_empty() {
                path.to_owned()
            } else {
                format!("{path}?{}", query.join("&"))
            };
            return Some(
                (
                    [(axum::http::header::SET_COOKIE, app.guard.cookie())],
                    Redirect::to(&to),
                )
                    .into_response(),
            );
        }
        return Some(pages::login(StatusCode::UNAUTHORIZED));
    }
    if app.guard.session_ok(headers) {
        None
    } else {
        Some(pages::login(StatusCode::UNAUTHORIZED))
    }
}

async fn overview(State(app): State<Shared>, headers: HeaderMap, params: Params) -> Response {
    if let Some(r) = gate(&app, &headers, "/", &params) {
        return r;
    }
    let fresh = params.contains_key("refresh");
    // Every consumer's DLQ read and CloudWatch numbers side by side: a
    // first page over several consumers waits for the slowest read, not
    // for their sum.
    let max_age = app.max_age;
    let views = futures_util::future::join_all(app.consumers.iter().map(|c| async move {
        let (snapshot, activity) = tokio::join!(c.snapshot(max_age, fresh), c.watch.activity());
        (c, snapshot, activity)
    }))
    .await;
    pages::overview(&app, &views)
}

async fn overview_json(State(app): State<Shared>, headers: HeaderMap, params: Params) -> Response {
    if let Some(r) = gate(&app, &headers, "/api/overview", &params) {
        return r;
    }
    // Polled every few seconds by an open overview: the depths are read
    // now (queue attributes, no receive); the letters come from the
    // snapshot as it is, whatever its age, so that watching the page does
    // not read the DLQ again and again; CloudWatch's numbers at most once
    // a minute.
    let mut consumers = Vec::new();
    for c in &app.consumers {
        let read = match c.snapshot(Duration::MAX, false).await {
            Ok(s) => c.depths().await.map(|d| (s, d)),
            Err(e) => Err(e),
        };
        match read {
            Ok((s, (dlq, source))) => {
                let activity = c.watch.activity().await;
                consumers.push(pages::overview_value(c, &s, dlq, source, &activity));
            }
            Err(e) => consumers.push(serde_json::json!({"name": c.name, "error": e})),
        }
    }
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        serde_json::json!({ "consumers": consumers }).to_string(),
    )
        .into_response()
}

async fn letters(
    State(app): State<Shared>,
    Path(name): Path<String>,
    headers: HeaderMap,
    params: Params,
) -> Response {
    if let Some(r) = gate(&app, &headers, &format!("/c/{name}/letters"), &params) {
        return r;
    }
    let c = match app.consumer(&name) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let search = Search::from_pairs(|k| params.get(k).cloned());
    match c
        .snapshot(app.max_age, params.contains_key("refresh"))
        .await
    {
        Ok(s) => pages::letters(&app, c, &s, &search),
        Err(e) => pages::error(Some(&*app), StatusCode::BAD_GATEWAY, &e),
    }
}

async fn letter(
    State(app): State<Shared>,
    Path((name, id)): Path<(String, String)>,
    headers: HeaderMap,
    params: Params,
) -> Response {
    if let Some(r) = gate(&app, &headers, &format!("/c/{name}/letter/{id}"), &params) {
        return r;
    }
    let c = match app.consumer(&name) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let snapshot = match c.snapshot(app.max_age, false).await {
        Ok(s) => s,
        Err(e) => return pages::error(Some(&*app), StatusCode::BAD_GATEWAY, &e),
    };
    let Some(l) = snapshot.find(&id) else {
        return pages::error(
            Some(&*app),
            StatusCode::NOT_FOUND,
            &format!(
                "no dead letter {id} in {}'s DLQ (as read at {})",
                c.name,
                pages::time(Some(snapshot.read_at))
            ),
        );
    };
    // Its failure record, read now: the snapshot's context holds its
    // last error; the record holds the whole chain.
    let record = c
        .ctx
        .dlq
        .failure_record(l.context.job_id.as_deref().unwrap_or(&l.message.message_id))
        .await;
    pages::letter(&app, c, l, record.ok().flatten().as_ref())
}

async fn preview(
    State(app): State<Shared>,
    Path((name, action)): Path<(String, String)>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let (c, action, search) = match checked_post(&app, &headers, &name, &action, &form) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    match actions::preview(&app, c, action, &search, &guard::who(&headers)).await {
        Ok(p) => pages::preview(&app, c, &p),
        Err(e) => pages::error(Some(&*app), StatusCode::BAD_REQUEST, &e),
    }
}

async fn start(
    State(app): State<Shared>,
    Path((name, action)): Path<(String, String)>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if let Err(r) = checked_post(&app, &headers, &name, &action, &form) {
        return *r;
    }
    let Some(index) = app.consumers.iter().position(|c| c.name == name) else {
        return pages::error(
            Some(&*app),
            StatusCode::NOT_FOUND,
            &format!("no consumer {name}"),
        );
    };
    let Some(action) = Action::parse(&action) else {
        return pages::error(
            Some(&*app),
            StatusCode::NOT_FOUND,
            &format!("no action {action}"),
        );
    };
    let search = Search::from_pairs(|k| form.get(k).cloned());
    let rate = match form.get("rate").map(|r| r.trim()).filter(|r| !r.is_empty()) {
        None => None,
        Some(_) if action != Action::Redrive => {
            return pages::error(
                Some(&*app),
                StatusCode::BAD_REQUEST,
                "a pace (rate) applies to a redrive only; nothing was done",
            );
        }
        Some(r) => {
            let rate = r
                .parse::<f64>()
                .map_err(|_| "is not a number of messages per second".to_owned())
                .and_then(|v| Rate::per_second(v).map_err(|e| e.why));
            match rate {
                Ok(rate) => Some(rate),
                Err(why) => {
                    return pages::error(
                        Some(&*app),
                        StatusCode::BAD_REQUEST,
                        &format!("pace {r:?}: {why}; nothing was done"),
                    );
                }
            }
        }
    };
    match actions::start(
        app.clone(),
        index,
        action,
        search,
        rate,
        guard::who(&headers),
    )
    .await
    {
        Ok(id) => Redirect::to(&format!("/tasks/{id}")).into_response(),
        Err(e) => pages::error(Some(&*app), StatusCode::BAD_REQUEST, &e),
    }
}

/// A POST's checks, in order: the session, CSRF (token and origin), the
/// consumer and the action, and whether the action is allowed.
fn checked_post<'a>(
    app: &'a App,
    headers: &HeaderMap,
    name: &str,
    action: &str,
    form: &HashMap<String, String>,
) -> Result<(&'a Consumer, Action, Search), Box<Response>> {
    if let Err(why) = app
        .guard
        .post_ok(headers, form.get("csrf").map(String::as_str))
    {
        // No navigation: the request may not come from a signed-in page.
        return Err(Box::new(pages::error(
            None,
            StatusCode::FORBIDDEN,
            &format!("cross-site request refused: {why}"),
        )));
    }
    let c = app.consumer(name)?;
    let Some(action) = Action::parse(action) else {
        return Err(Box::new(pages::error(
            Some(app),
            StatusCode::NOT_FOUND,
            &format!("no action {action}"),
        )));
    };
    if !app.allowed.contains(&action) {
        return Err(Box::new(pages::error(
            Some(app),
            StatusCode::FORBIDDEN,
            &format!(
                "read-only: this console was started without --allow {}; nothing was done",
                action.name()
            ),
        )));
    }
    Ok((c, action, Search::from_pairs(|k| form.get(k).cloned())))
}

async fn task(
    State(app): State<Shared>,
    Path(id): Path<String>,
    headers: HeaderMap,
    params: Params,
) -> Response {
    if let Some(r) = gate(&app, &headers, &format!("/tasks/{id}"), &params) {
        return r;
    }
    match app.tasks.get(&id) {
        Some(t) => pages::task(&app, &t),
        None => pages::error(Some(&*app), StatusCode::NOT_FOUND, &format!("no task {id}")),
    }
}

async fn download(
    State(app): State<Shared>,
    Path(id): Path<String>,
    headers: HeaderMap,
    params: Params,
) -> Response {
    if let Some(r) = gate(&app, &headers, &format!("/tasks/{id}/download"), &params) {
        return r;
    }
    match app.tasks.get(&id).and_then(|t| t.export()) {
        Some(body) => (
            [
                (
                    axum::http::header::CONTENT_TYPE,
                    "application/x-ndjson".to_owned(),
                ),
                (
                    axum::http::header::CONTENT_DISPOSITION,
                    format!("attachment; filename=\"dead-letters-{id}.jsonl\""),
                ),
            ],
            body,
        )
            .into_response(),
        None => pages::error(
            Some(&*app),
            StatusCode::NOT_FOUND,
            &format!("no export of task {id}"),
        ),
    }
}

async fn audit(State(app): State<Shared>, headers: HeaderMap, params: Params) -> Response {
    if let Some(r) = gate(&app, &headers, "/audit", &params) {
        return r;
    }
    pages::audit(&app, &app.audit.read())
}

/// Any other path: 404 for a session (a first visit with the token gets
/// its cookie first, as on every page), else the sign-in page.
async fn not_found(
    State(app): State<Shared>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    params: Params,
) -> Response {
    if let Some(r) = gate(&app, &headers, uri.path(), &params) {
        return r;
    }
    pages::error(Some(&*app), StatusCode::NOT_FOUND, "no such page")
}
