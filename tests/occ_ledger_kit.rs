//! The ledger's optimistic path (`LEDGER_OCC=1`, `OccLedger` in
//! examples/ledger.rs) through the test kit: on accounts the plain ledger
//! created (no `version` attribute), and with follow-ups.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use idemq::store::dynamodb::Effect;
use idemq::store::dynamodb::Key;
use idemq::testing::TestKit;
use idemq::{Handler, JobError, JobMeta};

#[path = "common/event.rs"]
mod event;
#[path = "../examples/ledger.rs"]
mod ledger;

use ledger::{Ledger, OccLedger, Transfer};

const TABLE: &str = "ledger";
const QUEUE: &str = "ledger-jobs";

fn plain() -> Ledger {
    Ledger {
        table: TABLE.into(),
        fail_accounts: HashSet::new(),
    }
}

/// The plain ledger until `occ` is set, then the optimistic one: the same
/// table before and after a switch to `LEDGER_OCC=1`.
#[derive(Clone, Default)]
struct Switch {
    occ: Arc<AtomicBool>,
    occ_ledger: Arc<OnceLock<OccLedger>>,
}

impl Handler for Switch {
    type Job = Transfer;
    type Effect = idemq::store::dynamodb::Effect;

    async fn handle(&self, t: Transfer, meta: JobMeta) -> Result<Effect, JobError> {
        if self.occ.load(Ordering::SeqCst) {
            let occ = self.occ_ledger.get().expect("set after the kit");
            occ.handle(t, meta).await
        } else {
            plain().handle(t, meta).await
        }
    }
}

fn kit() -> (TestKit<Switch>, Switch) {
    let switch = Switch::default();
    let kit = TestKit::new(switch.clone(), TABLE);
    let occ = OccLedger {
        ledger: plain(),
        dynamodb: kit.dynamodb_client().clone(),
    };
    assert!(switch.occ_ledger.set(occ).is_ok());
    (kit, switch)
}

fn event(message_id: &str, body: &str, job_id: &str) -> String {
    event::sqs_event(QUEUE, &[(message_id, body, Some(job_id), 1)])
}

fn number<H: idemq::Handler>(kit: &TestKit<H>, account: &str, name: &str) -> Option<String> {
    kit.item(&Key::string("pk", format!("account#{account}")))
        .and_then(|i| i.get(name).and_then(|v| v.as_n().ok()).cloned())
}

async fn commit(kit: &TestKit<Switch>, message_id: &str, body: &str, job_id: &str) {
    let run = kit
        .run_json(&event(message_id, body, job_id))
        .await
        .unwrap();
    // `dead_letters` holds every send of the run; the DLQ's are the dead.
    let dead: Vec<_> = run
        .dead_letters
        .iter()
        .filter(|m| m.queue_url.ends_with("-dlq"))
        .collect();
    assert!(
        run.failed_ids().is_empty() && dead.is_empty(),
        "{job_id} did not commit: failed {:?}, dead {dead:?}",
        run.failed_ids(),
    );
}

/// An account the plain ledger created has a balance and no version: the
/// optimistic ledger reads it as version 0, commits, and versions it.
#[tokio::test]
async fn the_occ_ledger_commits_on_an_account_the_plain_ledger_created() {
    let (kit, switch) = kit();
    commit(
        &kit,
        "m-1",
        r#"{"transfer_id":"t-1","account":"alice","amount":5}"#,
        "t-1",
    )
    .await;
    assert_eq!(number(&kit, "alice", "balance").as_deref(), Some("5"));
    assert_eq!(number(&kit, "alice", "version"), None);

    switch.occ.store(true, Ordering::SeqCst);
    commit(
        &kit,
        "m-2",
        r#"{"transfer_id":"t-2","account":"alice","amount":7}"#,
        "t-2",
    )
    .await;
    assert_eq!(number(&kit, "alice", "balance").as_deref(), Some("12"));
    assert_eq!(number(&kit, "alice", "version").as_deref(), Some("1"));
    commit(
        &kit,
        "m-3",
        r#"{"transfer_id":"t-3","account":"alice","amount":1}"#,
        "t-3",
    )
    .await;
    assert_eq!(number(&kit, "alice", "balance").as_deref(), Some("13"));
    assert_eq!(number(&kit, "alice", "version").as_deref(), Some("2"));
}

/// `then_credit` on the optimistic path sends its follow-up, as the plain
/// ledger does, and the follow-up credits the next account.
#[tokio::test]
async fn the_occ_ledger_sends_the_transfers_follow_up() {
    let (kit, switch) = kit();
    switch.occ.store(true, Ordering::SeqCst);
    commit(
        &kit,
        "m-1",
        r#"{"transfer_id":"t-1","account":"alice","amount":4,"then_credit":"bob"}"#,
        "t-1",
    )
    .await;
    let sent = event::sent_to(&kit, QUEUE);
    assert_eq!(sent.len(), 1, "the follow-up was not sent: {sent:?}");
    assert_eq!(sent[0].attribute("idemq-job-id"), Some("t-1/then"));
    commit(&kit, "m-2", &sent[0].body, "t-1/then").await;
    assert_eq!(number(&kit, "alice", "balance").as_deref(), Some("4"));
    assert_eq!(number(&kit, "bob", "balance").as_deref(), Some("4"));
    assert_eq!(number(&kit, "bob", "version").as_deref(), Some("1"));
}
