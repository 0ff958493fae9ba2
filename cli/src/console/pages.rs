//! The console's HTML: server-rendered pages, one stylesheet, a few lines
//! of script (the overview's changes). Every value is escaped; payloads
//! appear only on the letter page, and only with `--show-payloads`.
//!
//! Elements tests and scripts rely on carry ids, classes and `data-`
//! attributes (`data-page` on every body, `data-metric`, `data-field`,
//! `data-result`): docs/console.md lists them.

use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use idemq::dlq::peek::Depth;
use idemq::failure::FailureRecord;

use super::App;
use super::actions::{Action, Brief, Preview, Record, State, Task};
use super::metrics::{Activity, HOURS};
use super::snapshot::{Consumer, Letter, SEARCH_FIELDS, Search, Snapshot, Trend};

/// Letters shown on a page at most; the count says how many match.
const MAX_ROWS: usize = 500;

const STYLE: &str = "
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
nav{background:#1d2330;padding:8px 16px}nav a{color:#dfe6f3;margin-right:16px;text-decoration:none}
main{padding:16px 24px;max-width:1200px}h1{font-size:20px;margin:8px 0 16px}h2{font-size:16px;margin:20px 0 8px}
table{border-collapse:collapse;background:#fff;width:100%;margin-bottom:12px}
th,td{border-bottom:1px solid #e3e6eb;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600}td.count,td.attempts{text-align:right}
section.consumer{background:#fff;border:1px solid #e3e6eb;border-radius:6px;padding:12px 16px;margin-bottom:16px}
dl.metrics{display:flex;flex-wrap:wrap;gap:8px 20px;margin:0}
dl.metrics dt{font-size:12px;color:#5b6475}dl.metrics dd{margin:0;font-size:20px}
dl.kv{display:grid;grid-template-columns:max-content auto;gap:4px 16px}dl.kv dt{color:#5b6475}dl.kv dd{margin:0}
figure.chart{display:inline-block;margin:16px 40px 0 0}figure.chart figcaption{font-size:12px;color:#5b6475;margin-bottom:4px}
svg.chart rect.bar{fill:#c4463a}svg.chart[data-chart=retries-per-hour] rect.bar{fill:#d08a1e}svg.chart text{font-size:10px;fill:#5b6475}
form#search{display:flex;flex-wrap:wrap;gap:8px;align-items:end;margin-bottom:12px}
form#search label{display:flex;flex-direction:column;font-size:12px;color:#5b6475}
form.action{display:inline-block;margin-right:8px}p.read-only{color:#8a5a00;margin:4px 0}
button{padding:5px 12px;border:1px solid #9aa3b2;border-radius:4px;background:#fff;cursor:pointer}
button:disabled{color:#9aa3b2;cursor:not-allowed}button.danger{border-color:#c4463a;color:#c4463a}
.error{color:#c4463a}.note{color:#5b6475}pre{background:#fff;border:1px solid #e3e6eb;padding:8px;overflow:auto}
#changes{color:#5b6475;margin-bottom:12px}
table.trends td.hours{width:1%;white-space:nowrap}svg.strip rect.bar{fill:#c4463a}svg.strip rect.first{fill:#1d5fbf}
svg.strip line{stroke:#9aa3b2}span.first{color:#1d5fbf;font-weight:600}
";

pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encodes a query value or path segment.
pub(crate) fn url_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A time as RFC 3339 to the second, or `-`.
pub(crate) fn time(t: Option<SystemTime>) -> String {
    t.map_or_else(
        || "-".into(),
        |t| humantime::format_rfc3339_seconds(t).to_string(),
    )
}

fn age(since: Option<SystemTime>, now: SystemTime) -> String {
    since.and_then(|t| now.duration_since(t).ok()).map_or_else(
        || "-".into(),
        |d| humantime::format_duration(Duration::from_secs(d.as_secs())).to_string(),
    )
}

/// A whole page. No page may be framed (clickjacking) or cached, nor
/// send its address to another site in a Referer. `same-origin`, not
/// `no-referrer`: under `no-referrer` Chromium sends `Origin: null` with
/// the page's own form posts, which the origin check must refuse.
fn page(status: StatusCode, app: Option<&App>, kind: &str, title: &str, body: &str) -> Response {
    let mut nav = String::new();
    let mut csrf = String::new();
    if let Some(app) = app {
        nav.push_str("<nav><a href=\"/\">Overview</a>");
        for c in &app.consumers {
            let _ = write!(
                nav,
                "<a href=\"/c/{}/letters\">{} dead letters</a>",
                url_encode(&c.name),
                esc(&c.name)
            );
        }
        nav.push_str("<a href=\"/audit\">Audit</a></nav>");
        csrf = format!("<meta name=\"csrf\" content=\"{}\">", app.guard.csrf());
    }
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">{csrf}\
         <title>{} · idemq console</title><style>{STYLE}</style></head>\
         <body data-page=\"{kind}\">{nav}<main><h1>{}</h1>{body}</main></body></html>",
        esc(title),
        esc(title)
    );
    (
        status,
        [
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::CACHE_CONTROL, "no-store"),
            (header::REFERRER_POLICY, "same-origin"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        Html(html),
    )
        .into_response()
}

pub(crate) fn login(status: StatusCode) -> Response {
    page(
        status,
        None,
        "login",
        "Not signed in",
        "<p>Open the address <code>idemq console</code> printed when it started \
         (it carries a secret token); this browser then keeps a session cookie.</p>",
    )
}

/// An error page; with `app` (a signed-in request), with the navigation.
pub(crate) fn error(app: Option<&App>, status: StatusCode, message: &str) -> Response {
    page(
        status,
        app,
        "error",
        status.canonical_reason().unwrap_or("Error"),
        &format!(
            "<p id=\"error\" class=\"error\">{}</p><p><a href=\"/\">Overview</a></p>",
            esc(message)
        ),
    )
}

fn metric(out: &mut String, name: &str, label: &str, value: String) {
    let _ = write!(
        out,
        "<div><dt>{}</dt><dd data-metric=\"{name}\">{}</dd></div>",
        esc(label),
        esc(&value)
    );
}

/// Bars of `per_hour` (oldest first), one per hour; `data-values` holds
/// the numbers for scripts and tests.
fn chart(name: &str, label: &str, per_hour: &[u64]) -> String {
    let hours = per_hour.len();
    let (w, h, bar) = (hours * 20, 120, 16);
    let max = per_hour.iter().copied().max().unwrap_or(0).max(1);
    let values: Vec<String> = per_hour.iter().map(u64::to_string).collect();
    let mut svg = format!(
        "<figure class=\"chart\"><figcaption>{}, last {hours} hours</figcaption>\
         <svg class=\"chart\" data-chart=\"{name}\" data-values=\"{}\" width=\"{w}\" \
         height=\"{}\" role=\"img\" aria-label=\"{}, last {hours} hours\">",
        esc(label),
        values.join(","),
        h + 14,
        esc(label)
    );
    for (i, n) in per_hour.iter().enumerate() {
        let height = (*n * h / max) as usize;
        let hours_ago = hours - i;
        let _ = write!(
            svg,
            "<rect class=\"bar\" x=\"{}\" y=\"{}\" width=\"{bar}\" height=\"{height}\">\
             <title>{n} in the hour {hours_ago} h ago</title></rect>",
            i * 20 + 2,
            h as usize - height
        );
    }
    // A baseline, so that hours without a value read as zero.
    let _ = write!(
        svg,
        "<line x1=\"0\" y1=\"{h}\" x2=\"{w}\" y2=\"{h}\" stroke=\"#9aa3b2\"/>\
         <text x=\"0\" y=\"{y}\">{hours} h ago</text><text x=\"{}\" y=\"{y}\">{} h ago</text>\
         <text x=\"{}\" y=\"{y}\">now</text></svg></figure>",
        w / 2 - 20,
        hours / 2,
        w - 22,
        y = h + 12
    );
    svg
}

/// One trend's hours as a strip of small bars (oldest first), the hour of
/// its first letter drawn apart when `mark_first`.
fn strip(t: &Trend, mark_first: bool) -> String {
    let max = t.per_hour.iter().copied().max().unwrap_or(0).max(1);
    let (bar, h) = (6, 18);
    let w = t.per_hour.len() * bar;
    let mut svg = format!(
        "<svg class=\"strip\" width=\"{w}\" height=\"{}\" role=\"img\" \
         aria-label=\"per hour, last {} hours\">",
        h + 1,
        t.per_hour.len()
    );
    for (i, n) in t.per_hour.iter().enumerate() {
        let height = (*n as usize * h).div_ceil(max as usize);
        let first = mark_first && t.first_hour == Some(i);
        let _ = write!(
            svg,
            "<rect class=\"bar{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{height}\">\
             <title>{n} in the hour {} h ago{}</title></rect>",
            if first { " first" } else { "" },
            i * bar,
            h - height,
            bar - 1,
            t.per_hour.len() - i,
            if first { ": its first" } else { "" }
        );
    }
    let _ = write!(
        svg,
        "<line x1=\"0\" y1=\"{h}\" x2=\"{w}\" y2=\"{h}\"/></svg>"
    );
    svg
}

/// The overview's dead letters by cause and by deploy over the last hours:
/// one cause across deploys is a downstream's outage riding out backoff,
/// one new deploy across causes a bug it shipped. Each deploy's first
/// letter is marked in its strip and dated.
fn trends_part(s: &Snapshot, now: SystemTime) -> String {
    let mut out = String::new();
    if s.letters.is_empty() {
        return out;
    }
    for (title, key, others, trends) in [
        (
            "Dead letters by cause",
            "cause",
            "deploys",
            s.by_cause(HOURS, now),
        ),
        (
            "Dead letters by deploy, in the order they began to fail",
            "deploy",
            "causes",
            s.by_deploy(HOURS, now),
        ),
    ] {
        let deploys = key == "deploy";
        let _ = write!(
            out,
            "<h3>{title}</h3><table class=\"trends\" data-trend=\"{key}\"><thead><tr>\
             <th>{key}</th><th>letters</th>{}<th>{others}</th><th>last {HOURS} h</th></tr></thead><tbody>",
            if deploys { "<th>first failed</th>" } else { "" }
        );
        for t in &trends {
            let _ = write!(
                out,
                "<tr class=\"trend\" data-{key}=\"{}\" data-letters=\"{}\" data-{others}=\"{}\" \
                 data-values=\"{}\"{}><td class=\"label\">{}</td><td class=\"count\">{}</td>",
                esc(&t.label),
                t.letters,
                esc(&t.others.join("\n")),
                t.per_hour
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                t.first_hour
                    .filter(|_| deploys)
                    .map_or_else(String::new, |i| format!(" data-first-hour=\"{i}\"")),
                esc(&t.label),
                t.letters
            );
            if deploys {
                let _ = write!(
                    out,
                    "<td class=\"first-failed\"><span class=\"first\">▲</span> {}</td>",
                    time(t.first)
                );
            }
            let _ = write!(
                out,
                "<td class=\"others\">{}</td><td class=\"hours\">{}</td></tr>",
                esc(&t.others.join(", ")),
                strip(t, deploys)
            );
        }
        out.push_str("</tbody></table>");
    }
    out.push_str(
        "<p class=\"note\">A cause is a letter's last error with its numbers, ids and quoted \
         text masked; a deploy is the function version (or <code>IDEMQ_DEPLOY</code>) and the \
         idemq version that failed it, as <code>idemq dlq stats</code> counts them. \
         <span class=\"first\">▲</span> marks the hour of a deploy's first dead letter.</p>",
    );
    out
}

/// `trends` as `/api/overview` gives them: `key` and `others` name the
/// trend's label and its other values.
fn trends_value(trends: &[Trend], key: &str, others: &str) -> serde_json::Value {
    trends
        .iter()
        .map(|t| {
            serde_json::json!({
                key: t.label,
                "letters": t.letters,
                others: t.others,
                "per_hour": t.per_hour,
                "first_failed_at": t.first.map(|t| time(Some(t))),
                "first_hour": t.first_hour,
            })
        })
        .collect()
}

/// The retries chart and where its numbers come from, or why there are
/// none.
fn cloudwatch_part(activity: Result<&Activity, &String>) -> String {
    match activity {
        Err(e) => format!(
            "<p class=\"note cloudwatch error\" id=\"cloudwatch-error\">Retries and the oldest \
             waiting message come from CloudWatch, which could not be read: {}</p>",
            esc(e)
        ),
        Ok(a) => {
            let mut out = chart(
                "retries-per-hour",
                "Jobs retried per hour (CloudWatch)",
                &a.retried,
            );
            let _ = write!(
                out,
                "<p class=\"note\">Retries per hour: the consumer's <code>JobsRetried</code> \
                 metric (namespace <code>idemq</code>), out of its <code>BatchSize</code>; the \
                 oldest waiting message: SQS's <code>ApproximateAgeOfOldestMessage</code>{}. \
                 From CloudWatch at {}.</p>",
                if a.oldest.is_none() {
                    " (no value in the last 15 minutes)"
                } else {
                    ""
                },
                time(Some(a.read_at))
            );
            out
        }
    }
}

fn depth_text(d: Option<u64>) -> String {
    d.map_or_else(|| "-".into(), |n| n.to_string())
}

/// `/api/overview`'s entry for `c`: `dlq` and `source` as read now, the
/// rest from the snapshot `s`.
pub(crate) fn overview_value(
    c: &Consumer,
    s: &Snapshot,
    dlq: Depth,
    source: Option<Depth>,
    activity: &Result<Activity, String>,
) -> serde_json::Value {
    let now = SystemTime::now();
    let cloudwatch = match activity {
        Ok(a) => serde_json::json!({
            "retried_per_hour": a.retried,
            "received_per_hour": a.received,
            "source_oldest_age_secs": a.oldest.map(|(age, _)| age.as_secs()),
            "read_at": time(Some(a.read_at)),
        }),
        Err(e) => serde_json::json!({ "error": e }),
    };
    serde_json::json!({
        "name": c.name,
        "source": source.map(|d| serde_json::json!({
            "visible": d.visible, "in_flight": d.in_flight, "delayed": d.delayed
        })),
        "dlq": {
            "depth": dlq.total(),
            "oldest_age_secs": s.oldest().and_then(|t| now.duration_since(t).ok()).map(|d| d.as_secs()),
        },
        "dead_per_hour": s.per_hour(HOURS, now),
        "dead_by_cause": trends_value(&s.by_cause(HOURS, now), "cause", "deploys"),
        "dead_by_deploy": trends_value(&s.by_deploy(HOURS, now), "deploy", "causes"),
        "read_at": time(Some(s.read_at)),
        "cloudwatch": cloudwatch,
    })
}

/// A consumer on the overview: its DLQ's snapshot and CloudWatch's numbers,
/// each as read or why not.
pub(crate) type ConsumerView<'a> = (
    &'a Consumer,
    Result<Arc<Snapshot>, String>,
    Arc<Result<Activity, String>>,
);

pub(crate) fn overview(app: &App, views: &[ConsumerView<'_>]) -> Response {
    let now = SystemTime::now();
    let mut body = String::from(
        "<div id=\"changes\">watching for changes…</div>\
         <p><a id=\"refresh\" href=\"/?refresh=1\">Read the DLQs now</a></p>",
    );
    for (c, s, activity) in views {
        let _ = write!(
            body,
            "<section class=\"consumer\" data-consumer=\"{}\"><h2><a href=\"/c/{}/letters\">{}</a></h2>",
            esc(&c.name),
            url_encode(&c.name),
            esc(&c.name)
        );
        match s {
            Err(e) => {
                let _ = write!(
                    body,
                    "<p class=\"error\">cannot read its DLQ: {}</p>",
                    esc(e)
                );
            }
            Ok(s) => {
                let per_hour = s.per_hour(HOURS, now);
                body.push_str("<dl class=\"metrics\">");
                metric(
                    &mut body,
                    "source-visible",
                    "source queue: waiting",
                    depth_text(s.source.map(|d| d.visible)),
                );
                metric(
                    &mut body,
                    "source-in-flight",
                    "in flight",
                    depth_text(s.source.map(|d| d.in_flight)),
                );
                metric(
                    &mut body,
                    "source-delayed",
                    "delayed",
                    depth_text(s.source.map(|d| d.delayed)),
                );
                metric(
                    &mut body,
                    "source-oldest-age",
                    "oldest waiting",
                    match activity.as_ref() {
                        Ok(a) => a.oldest.map_or_else(
                            || "-".into(),
                            |(d, _)| {
                                humantime::format_duration(Duration::from_secs(d.as_secs()))
                                    .to_string()
                            },
                        ),
                        Err(_) => "?".into(),
                    },
                );
                metric(
                    &mut body,
                    "dlq-depth",
                    "DLQ depth",
                    s.dlq.total().to_string(),
                );
                metric(
                    &mut body,
                    "dlq-oldest-age",
                    "oldest dead letter",
                    age(s.oldest(), now),
                );
                metric(
                    &mut body,
                    "dead-last-hour",
                    "died in the last hour",
                    per_hour.last().copied().unwrap_or(0).to_string(),
                );
                metric(
                    &mut body,
                    "dead-last-24h",
                    "in the last 24 h",
                    per_hour.iter().sum::<u64>().to_string(),
                );
                if let Ok(a) = activity.as_ref() {
                    metric(
                        &mut body,
                        "retried-last-hour",
                        "retried in the last hour",
                        a.retried.last().copied().unwrap_or(0).to_string(),
                    );
                    metric(
                        &mut body,
                        "retry-rate-last-hour",
                        "retry rate (of receives)",
                        a.retry_rate_last_hour()
                            .map_or_else(|| "-".into(), |r| format!("{:.1} %", r * 100.0)),
                    );
                }
                body.push_str("</dl>");
                body.push_str(&chart(
                    "dead-letters-per-hour",
                    "Dead letters per hour",
                    &per_hour,
                ));
                body.push_str(&trends_part(s, now));
                body.push_str(&cloudwatch_part(activity.as_ref().as_ref()));
                let _ = write!(
                    body,
                    "<p class=\"note\">Read at {}; dead letters per hour from each letter's \
                     failure time.{}</p>",
                    time(Some(s.read_at)),
                    if s.unseen > 0 {
                        format!(
                            " About {} letters could not be read (FIFO groups behind held letters).",
                            s.unseen
                        )
                    } else {
                        String::new()
                    }
                );
            }
        }
        body.push_str("</section>");
    }
    body.push_str(CHANGES_SCRIPT);
    page(StatusCode::OK, Some(app), "overview", "Overview", &body)
}

/// Compares /api/overview every 5 s with what the page opened with.
const CHANGES_SCRIPT: &str = r#"<script>
(function () {
  var first = null, opened = new Date();
  function flat(o) {
    var m = {};
    (o.consumers || []).forEach(function (c) {
      if (c.source) { m[c.name + " source-visible"] = c.source.visible; m[c.name + " source-in-flight"] = c.source.in_flight; }
      if (c.dlq) { m[c.name + " dlq-depth"] = c.dlq.depth; }
    });
    return m;
  }
  function poll() {
    fetch("/api/overview", {credentials: "same-origin"}).then(function (r) { return r.json(); }).then(function (o) {
      var now = flat(o);
      if (first === null) { first = now; }
      var changes = [];
      Object.keys(now).forEach(function (k) {
        var d = now[k] - (first[k] || 0);
        if (d !== 0) { changes.push(k + " " + (d > 0 ? "+" : "") + d); }
      });
      document.getElementById("changes").textContent = changes.length
        ? "since " + opened.toLocaleTimeString() + ": " + changes.join(", ")
        : "no change since " + opened.toLocaleTimeString();
    }).catch(function () {});
  }
  poll();
  setInterval(poll, 5000);
})();
</script>"#;

fn hidden_search(search: &Search, csrf: &str) -> String {
    let mut s = format!("<input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">");
    for (k, v) in search.pairs() {
        if !v.is_empty() {
            let _ = write!(
                s,
                "<input type=\"hidden\" name=\"{k}\" value=\"{}\">",
                esc(v)
            );
        }
    }
    s
}

fn query(search: &Search) -> String {
    search
        .pairs()
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", url_encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn letter_rows(out: &mut String, consumer: &str, rows: impl Iterator<Item = Brief>) {
    out.push_str(
        "<tr><th>job id</th><th>message id</th><th>attempts</th><th>failed at</th><th>last error</th></tr>",
    );
    for b in rows {
        let id = b.job_id.clone().unwrap_or_else(|| b.message_id.clone());
        let _ = write!(
            out,
            "<tr class=\"letter\" data-message-id=\"{}\" data-job-id=\"{}\">\
             <td class=\"job-id\"><a href=\"/c/{}/letter/{}\">{}</a></td><td class=\"message-id\">{}</td>\
             <td class=\"attempts\">{}</td><td class=\"failed-at\">{}</td><td class=\"error\">{}</td></tr>",
            esc(&b.message_id),
            esc(b.job_id.as_deref().unwrap_or("")),
            url_encode(consumer),
            url_encode(&id),
            esc(b.job_id.as_deref().unwrap_or("-")),
            esc(&b.message_id),
            b.attempts.map_or_else(|| "-".into(), |a| a.to_string()),
            time(b.failed_at),
            esc(&idemq::dlq::inspect::one_line(&b.error, 200)),
        );
    }
}

pub(crate) fn letters(app: &App, c: &Consumer, s: &Snapshot, search: &Search) -> Response {
    let mut body = String::new();
    let labels = [
        ("job", "job id or message id"),
        ("error", "error contains"),
        ("since", "failed since (time or 2h)"),
        ("until", "failed until"),
        ("pointer", "payload field (JSON pointer)"),
        ("value", "equals"),
        ("group", "group"),
    ];
    debug_assert_eq!(labels.map(|(k, _)| k), SEARCH_FIELDS);
    body.push_str("<form id=\"search\" method=\"get\">");
    for ((k, label), (_, v)) in labels.iter().zip(search.pairs()) {
        let _ = write!(
            body,
            "<label>{label}<input name=\"{k}\" value=\"{}\"></label>",
            esc(v)
        );
    }
    body.push_str("<button id=\"search-submit\">Search</button></form>");
    let matcher = match search.matcher(SystemTime::now()) {
        Ok(m) => m,
        Err(e) => {
            let _ = write!(body, "<p id=\"error\" class=\"error\">{}</p>", esc(&e));
            return page(
                StatusCode::BAD_REQUEST,
                Some(app),
                "letters",
                &format!("{} dead letters", c.name),
                &body,
            );
        }
    };
    let all: Vec<&Letter> = s.letters.iter().collect();
    let matched = matcher.select(s);
    // The groups of what matches, each a link that narrows the search to it.
    body.push_str("<h2>By cause</h2><table id=\"groups\"><tr><th>kind</th><th>cause</th><th>count</th><th>first seen</th><th>last seen</th><th></th></tr>");
    let groups = Snapshot::groups(if search.is_empty() { &all } else { &matched });
    for g in &groups {
        let narrowed = Search {
            group: g.id.to_owned(),
            ..search.clone()
        };
        let _ = write!(
            body,
            "<tr class=\"group\" data-group=\"{}\"><td class=\"kind\">{}</td><td class=\"error\">{}</td>\
             <td class=\"count\">{}</td><td class=\"first-seen\">{}</td><td class=\"last-seen\">{}</td>\
             <td><a class=\"group-filter\" href=\"/c/{}/letters?{}\">show</a></td></tr>",
            esc(g.id),
            g.kind.label(),
            esc(if g.cause.is_empty() {
                "(no recorded error)"
            } else {
                g.cause
            }),
            g.count,
            time(g.first),
            time(g.last),
            url_encode(&c.name),
            query(&narrowed),
        );
    }
    body.push_str("</table>");
    let _ = write!(
        body,
        "<p id=\"match-count\">{} of {} dead letters match</p><p class=\"note\">Read at {} \
         (<a id=\"refresh\" href=\"/c/{}/letters?{}{}refresh=1\">read the DLQ now</a>).{}</p>",
        matched.len(),
        s.letters.len(),
        time(Some(s.read_at)),
        url_encode(&c.name),
        query(search),
        if search.is_empty() { "" } else { "&" },
        if s.unseen > 0 {
            format!(" About {} letters could not be read.", s.unseen)
        } else {
            String::new()
        }
    );
    // The actions, on what matches.
    body.push_str("<div id=\"actions\">");
    for action in Action::ALL {
        let a = action.name();
        let allowed = app.allowed.contains(&action);
        let _ = write!(
            body,
            "<form class=\"action\" data-action=\"{a}\" method=\"post\" action=\"/c/{}/preview/{a}\">{}\
             <button class=\"preview\"{}>Dry run: {a} {} letters</button>{}</form>",
            url_encode(&c.name),
            hidden_search(search, app.guard.csrf()),
            if allowed { "" } else { " disabled" },
            matched.len(),
            if allowed {
                String::new()
            } else {
                format!("<p class=\"read-only\">read-only: start the console with --allow {a}</p>")
            },
        );
    }
    body.push_str("</div><table id=\"letters\">");
    letter_rows(
        &mut body,
        &c.name,
        matched.iter().take(MAX_ROWS).map(|l| Brief::of(&l.context)),
    );
    body.push_str("</table>");
    if matched.len() > MAX_ROWS {
        let _ = write!(
            body,
            "<p class=\"note\">The first {MAX_ROWS} shown; narrow the search to see others.</p>"
        );
    }
    page(
        StatusCode::OK,
        Some(app),
        "letters",
        &format!("{} dead letters", c.name),
        &body,
    )
}

fn field(out: &mut String, name: &str, label: &str, value: &str) {
    let _ = write!(
        out,
        "<dt>{}</dt><dd data-field=\"{name}\">{}</dd>",
        esc(label),
        esc(value)
    );
}

pub(crate) fn letter(
    app: &App,
    c: &Consumer,
    l: &Letter,
    record: Option<&FailureRecord>,
) -> Response {
    let ctx = &l.context;
    let m = &l.message;
    let mut body = String::from("<dl id=\"context\" class=\"kv\">");
    field(
        &mut body,
        "job-id",
        "job id",
        ctx.job_id.as_deref().unwrap_or("-"),
    );
    field(&mut body, "message-id", "message id (DLQ)", &m.message_id);
    field(&mut body, "kind", "how it died", l.kind.label());
    field(
        &mut body,
        "attempts",
        "attempts",
        &ctx.attempts.map_or_else(|| "-".into(), |a| a.to_string()),
    );
    field(&mut body, "failed-at", "last failure", &time(ctx.failed_at));
    // idemq's stamp, else when SQS's redrive kept the enqueue time (a
    // standard DLQ), else when it entered the DLQ: never later than the
    // job's first enqueue.
    field(
        &mut body,
        "first-enqueued",
        "first enqueued (at the latest)",
        &time(m.first_enqueued(c.ctx.dlq.peek().is_fifo(), Duration::ZERO)),
    );
    field(
        &mut body,
        "source-queue",
        "source queue",
        ctx.source_queue.as_deref().unwrap_or("-"),
    );
    field(&mut body, "deploy", "deploy", &ctx.deploy_line());
    field(&mut body, "error", "last error", &ctx.error_line());
    field(&mut body, "cause", "cause (grouped by)", &l.cause);
    field(
        &mut body,
        "payload-bytes",
        "payload bytes",
        &ctx.payload_bytes.to_string(),
    );
    field(
        &mut body,
        "failure-record",
        "failure record",
        if ctx.failure_record { "yes" } else { "no" },
    );
    if let Some(g) = m.group_id() {
        field(&mut body, "group-id", "message group", g);
    }
    if let Some(r) = record {
        field(
            &mut body,
            "record-attempt",
            "record: attempt",
            &r.attempt.to_string(),
        );
        field(
            &mut body,
            "record-kind",
            "record: kind",
            &format!("{:?}", r.failure.kind).to_lowercase(),
        );
        field(
            &mut body,
            "payload-hash",
            "record: payload hash",
            &r.payload_hash,
        );
    }
    body.push_str("</dl><h2>Error chain</h2><ol id=\"error-chain\">");
    let chain: Vec<String> = match record {
        Some(r) if !r.failure.chain.is_empty() => r.failure.chain.clone(),
        _ if !ctx.error_chain.is_empty() => ctx.error_chain.clone(),
        _ => ctx.last_error.clone().into_iter().collect(),
    };
    for e in &chain {
        let _ = write!(body, "<li>{}</li>", esc(e));
    }
    // Where it failed: the user's frames first, idemq's and the runtime's
    // folded into one line (src/backtrace.rs).
    body.push_str("</ol><h2>Where it failed</h2>");
    match ctx.backtrace.as_deref() {
        Some(bt) => {
            let _ = write!(body, "<pre id=\"backtrace\">{}</pre>", esc(bt));
        }
        None => body.push_str(
            "<p id=\"backtrace\" class=\"note\">no backtrace: not a handler's error or panic, or not captured (IDEMQ_BACKTRACE)</p>",
        ),
    }
    body.push_str("<h2>Message attributes</h2><table id=\"attributes\"><tr><th>name</th><th>type</th><th>value</th></tr>");
    let mut names: Vec<&String> = m.attributes.keys().collect();
    names.sort();
    for name in names {
        let a = &m.attributes[name];
        let value = a.string_value().map_or_else(
            || {
                format!(
                    "({} bytes)",
                    a.binary_value().map_or(0, |b| b.as_ref().len())
                )
            },
            str::to_owned,
        );
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(name),
            esc(a.data_type()),
            esc(&value)
        );
    }
    body.push_str("</table><h2>Envelope (SQS)</h2><table id=\"system\">");
    let mut system: Vec<(String, &String)> = m
        .system
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v))
        .collect();
    system.sort();
    for (k, v) in system {
        let _ = write!(body, "<tr><td>{}</td><td>{}</td></tr>", esc(&k), esc(v));
    }
    body.push_str("</table><h2>Payload</h2>");
    if app.show_payloads {
        let pretty = serde_json::from_str::<serde_json::Value>(&m.body)
            .ok()
            .and_then(|v| serde_json::to_string_pretty(&v).ok())
            .unwrap_or_else(|| m.body.clone());
        let _ = write!(body, "<pre id=\"payload\">{}</pre>", esc(&pretty));
    } else {
        body.push_str(
            "<p id=\"payload-hidden\" class=\"note\">Hidden: payloads may hold personal data. \
             Start the console with --show-payloads to see them.</p>",
        );
    }
    let title = format!(
        "Dead letter {}",
        ctx.job_id.as_deref().unwrap_or(&m.message_id)
    );
    page(StatusCode::OK, Some(app), "letter", &title, &body)
}

pub(crate) fn preview(app: &App, c: &Consumer, p: &Preview) -> Response {
    let a = p.action.name();
    let mut body = format!(
        "<p>Dry run: <span id=\"preview-action\">{a}</span> would take \
         <span id=\"preview-count\">{}</span> dead letters of {} (filter: {}). Nothing was changed.</p>",
        p.count,
        esc(&c.name),
        esc(&filter_text(&p.search)),
    );
    body.push_str(match p.action {
        Action::Redrive => "<p class=\"note\">Each is sent to its source queue stamped with its job id, then deleted from the DLQ: a kill at any instant loses nothing, and a job that was already applied is skipped by its marker.</p>",
        Action::Delete => "<p class=\"note\">They are first written to an archive file beside the audit file (JSON lines, as idemq dlq export writes them), read back, then deleted from the DLQ.</p>",
        Action::Export => "<p class=\"note\">Their JSON lines are offered for download; they stay in the DLQ.</p>",
    });
    if !p.refused.is_empty() {
        body.push_str("<div id=\"preview-refused\"><h2>Matched but not taken</h2><ul>");
        for r in &p.refused {
            let _ = write!(body, "<li>{}</li>", esc(r));
        }
        body.push_str("</ul></div>");
    }
    body.push_str("<h2>Sample</h2><table id=\"sample\">");
    letter_rows(
        &mut body,
        &c.name,
        p.sample.iter().map(|b| Brief {
            job_id: b.job_id.clone(),
            message_id: b.message_id.clone(),
            attempts: b.attempts,
            failed_at: b.failed_at,
            error: b.error.clone(),
        }),
    );
    body.push_str("</table>");
    if p.count > 0 {
        // A redrive's pace, as `idemq dlq redrive --rate`: a consumer that
        // is just back from an outage need not take them all at once.
        let pace = if p.action == Action::Redrive {
            "<label>at most <input id=\"run-rate\" name=\"rate\" size=\"6\" \
             inputmode=\"decimal\"> messages per second (empty: as fast as SQS takes them)</label> "
        } else {
            ""
        };
        let _ = write!(
            body,
            "<form id=\"run\" method=\"post\" action=\"/c/{}/run/{a}\">{}{pace}\
             <button id=\"run-submit\" class=\"danger\">{a} these {} letters</button></form>",
            url_encode(&c.name),
            hidden_search(&p.search, app.guard.csrf()),
            p.count
        );
    }
    page(
        StatusCode::OK,
        Some(app),
        "preview",
        &format!("Dry run: {a}"),
        &body,
    )
}

fn filter_text(search: &Search) -> String {
    let text = search.text();
    if text.is_empty() {
        "every letter".into()
    } else {
        text
    }
}

pub(crate) fn task(app: &App, t: &Task) -> Response {
    let state = t.state();
    let (label, refresh) = match &state {
        State::Running => ("running", true),
        State::Done => ("done", false),
        State::Failed(_) => ("failed", false),
    };
    let mut body = format!(
        "<p>{} of {}'s dead letters ({}): <span id=\"task-state\">{label}</span>, \
         <span id=\"task-progress\">{} of {}</span></p>",
        t.action.name(),
        esc(&t.consumer),
        esc(&filter_text(&t.search)),
        t.done.load(Ordering::Relaxed),
        t.total,
    );
    if let State::Failed(e) = &state {
        let _ = write!(body, "<p id=\"error\" class=\"error\">{}</p>", esc(e));
    }
    if matches!(state, State::Done) {
        body.push_str("<dl id=\"task-result\" class=\"kv\">");
        for (k, v) in t.result() {
            let _ = write!(body, "<dt>{k}</dt><dd data-result=\"{k}\">{v}</dd>");
        }
        body.push_str("</dl>");
        if t.export().is_some() {
            let _ = write!(
                body,
                "<p><a id=\"download\" href=\"/tasks/{}/download\">Download the JSON lines</a></p>",
                t.id
            );
        }
    }
    if let Some(path) = t.archived.lock().expect("task archive").as_ref() {
        let _ = write!(
            body,
            "<p id=\"archived\">Archived to {}</p>",
            esc(&path.display().to_string())
        );
    }
    let notes = t.notes();
    if !notes.is_empty() {
        body.push_str("<ul id=\"task-notes\">");
        for n in notes {
            let _ = write!(body, "<li>{}</li>", esc(&n));
        }
        body.push_str("</ul>");
    }
    let _ = write!(
        body,
        "<p><a href=\"/c/{}/letters\">Back to the dead letters</a> · <a href=\"/audit\">Audit</a></p>",
        url_encode(&t.consumer)
    );
    if refresh {
        body.push_str("<meta http-equiv=\"refresh\" content=\"1\">");
    }
    page(
        StatusCode::OK,
        Some(app),
        "task",
        &format!("Task {}", t.id),
        &body,
    )
}

pub(crate) fn audit(app: &App, records: &[Record]) -> Response {
    let mut body = format!(
        "<p class=\"note\">Every dry run and action, newest first, from {}.</p>\
         <table id=\"audit\"><tr><th>at</th><th>who</th><th>consumer</th><th>action</th><th>filter</th><th>count</th><th>outcome</th></tr>",
        esc(&app.audit.path().display().to_string())
    );
    for r in records {
        let _ = write!(
            body,
            "<tr class=\"audit\"><td class=\"at\">{}</td><td class=\"who\">{}</td><td class=\"consumer\">{}</td>\
             <td class=\"action\">{}</td><td class=\"filter\">{}</td><td class=\"count\">{}</td><td class=\"outcome\">{}</td></tr>",
            esc(&r.at),
            esc(&r.who),
            esc(&r.consumer),
            esc(&r.action),
            esc(if r.filter.is_empty() {
                "every letter"
            } else {
                &r.filter
            }),
            r.count,
            esc(&r.outcome)
        );
    }
    body.push_str("</table>");
    page(StatusCode::OK, Some(app), "audit", "Audit", &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped_and_encoded() {
        assert_eq!(
            esc("<a href='x'>&\"</a>"),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;"
        );
        assert_eq!(url_encode("acct 7/&=é"), "acct%207%2F%26%3D%C3%A9");
    }

    #[test]
    fn the_chart_has_a_bar_per_hour() {
        let svg = chart("retries-per-hour", "retries <per hour>", &[0, 3, 1]);
        assert_eq!(svg.matches("<rect class=\"bar\"").count(), 3);
        assert!(
            svg.contains("data-chart=\"retries-per-hour\" data-values=\"0,3,1\""),
            "{svg}"
        );
        assert!(
            svg.contains("retries &lt;per hour&gt;, last 3 hours"),
            "{svg}"
        );
        assert!(
            svg.contains("height=\"120\""),
            "the largest bar is full height: {svg}"
        );
    }
}
