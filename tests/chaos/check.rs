//! The checker: per sent job id, its effects (the probe counter) and its
//! DLQ copies.

use std::collections::{HashMap, HashSet};

use idemq::init::InitReport;

use crate::common::{attribute, drain};

/// What the checker found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub lost: usize,
    pub duplicated: usize,
    pub unexpected: usize,
    pub dead_lettered: usize,
}

/// Counts, per sent job id, its effects (the probe counter) and its DLQ
/// copies; and effects of ids never sent.
pub async fn check(
    sdk: &aws_config::SdkConfig,
    res: &InitReport,
    sent: &HashSet<String>,
) -> Report {
    let ddb = aws_sdk_dynamodb::Client::new(sdk);
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let mut counts: HashMap<String, i64> = HashMap::new();
    let mut start = None;
    loop {
        let out = ddb
            .scan()
            .table_name(&res.table_name)
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap();
        for item in out.items() {
            let pk = item["pk"].as_s().unwrap();
            if let Some(id) = pk.strip_prefix("probe#") {
                let n = item
                    .get("n")
                    .and_then(|v| v.as_n().ok())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                counts.insert(id.to_owned(), n);
            }
        }
        start = out.last_evaluated_key().cloned();
        if start.is_none() {
            break;
        }
    }
    let dead = dead_letters(&sqs, &res.dlq_url).await;
    tally(&counts, &dead, sent)
}

/// Drains the DLQ and returns the job ids in it. A dead-lettered job is
/// printed with its context (idemq's attributes or, after SQS's own
/// redrive, just its receive count), so a failing run says why it
/// happened.
pub async fn dead_letters(sqs: &aws_sdk_sqs::Client, dlq_url: &str) -> HashSet<String> {
    let letters = drain(sqs, dlq_url).await;
    for m in &letters {
        let context: Vec<String> = m
            .message_attributes()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some(format!("{k}={}", v.string_value()?)))
            .collect();
        eprintln!(
            "dead-lettered: {}, receives {:?}",
            context.join(", "),
            m.attributes()
                .and_then(|a| a
                    .get(&aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount))
        );
    }
    letters
        .iter()
        .map(|m| attribute(m, "idemq-job-id").to_owned())
        .collect()
}

/// The report for these effect counts per job id and these dead-lettered
/// ids, against the ids sent.
pub fn tally(
    counts: &HashMap<String, i64>,
    dead: &HashSet<String>,
    sent: &HashSet<String>,
) -> Report {
    let mut r = Report {
        dead_lettered: dead.len(),
        ..Report::default()
    };
    for id in sent {
        match counts.get(id).copied().unwrap_or(0) {
            0 if !dead.contains(id) => r.lost += 1,
            n if n > 1 => r.duplicated += 1,
            _ => {}
        }
    }
    r.unexpected = counts.keys().filter(|id| !sent.contains(*id)).count();
    r
}
