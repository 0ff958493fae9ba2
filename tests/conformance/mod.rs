//! The conformance harness: a scenario is written once against a
//! [`Backend`] (SDK clients, queue and table set-up, a wait) and runs twice,
//! on the simulation's models (tokio's paused clock: a wait costs nothing)
//! and on the local stack (real waits, kept to seconds). What the client
//! observed is normalised by the scenario (ids, URLs and timestamps turned
//! into facts such as "same id as sent") and compared step by step. A step
//! where the emulator is known to differ from AWS is listed in the
//! scenario's [`Divergence`]s with the AWS page that decides it: both sides
//! are then pinned to the listed values, so a change on either side fails.

pub mod dynamodb;
pub mod sqs;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::{Value, json};

use crate::sim::World;
use crate::sim::faults::{Faults, Rates};
use crate::sim::net::{self, Net};
use crate::sim::sqs::Queue;

/// What one scenario needs from a backend.
#[derive(Clone)]
pub struct Backend {
    pub sqs: aws_sdk_sqs::Client,
    pub ddb: aws_sdk_dynamodb::Client,
    world: Option<Arc<Mutex<World>>>,
    /// Queue URLs and table names created on the stack, deleted after.
    created: Arc<Mutex<(Vec<String>, Vec<String>)>>,
}

/// A queue to create.
#[derive(Debug, Clone, Default)]
pub struct QueueSpec {
    pub visibility: u64,
    pub max_message_size: Option<usize>,
    /// (DLQ URL, maxReceiveCount).
    pub redrive: Option<(String, u32)>,
}

impl Backend {
    /// Waits `d`: virtual time on the model, real time on the stack (the
    /// model's runtime is paused, so the same call serves both).
    pub async fn wait(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }

    pub async fn queue(&self, spec: QueueSpec) -> String {
        let name = crate::common::unique("conf");
        match &self.world {
            Some(world) => {
                let mut q = Queue::new(
                    &name,
                    Duration::from_secs(spec.visibility),
                    Duration::from_secs(4 * 24 * 3600),
                );
                if let Some(max) = spec.max_message_size {
                    q.max_message_size = max;
                }
                q.redrive = spec
                    .redrive
                    .map(|(dlq, max)| (dlq.rsplit('/').next().unwrap_or_default().to_owned(), max));
                world.lock().expect("world").sqs.add(q);
                crate::sim::sqs::url(&name)
            }
            None => {
                let mut create = self
                    .sqs
                    .create_queue()
                    .queue_name(&name)
                    .attributes(
                        QueueAttributeName::VisibilityTimeout,
                        spec.visibility.to_string(),
                    )
                    .attributes(QueueAttributeName::MessageRetentionPeriod, "345600");
                if let Some(max) = spec.max_message_size {
                    create =
                        create.attributes(QueueAttributeName::MaximumMessageSize, max.to_string());
                }
                if let Some((dlq, max)) = &spec.redrive {
                    let arn = self.arn(dlq).await;
                    create = create.attributes(
                        QueueAttributeName::RedrivePolicy,
                        json!({"deadLetterTargetArn": arn, "maxReceiveCount": max}).to_string(),
                    );
                }
                let url = create
                    .send()
                    .await
                    .expect("create queue")
                    .queue_url()
                    .expect("url")
                    .to_owned();
                self.created.lock().expect("created").0.push(url.clone());
                url
            }
        }
    }

    /// A queue's ARN, read back.
    pub async fn arn(&self, url: &str) -> String {
        self.sqs
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .expect("queue arn")
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::QueueArn))
            .expect("QueueArn")
            .clone()
    }

    /// A table with a String partition key `key` and no sort key.
    pub async fn table(&self, key: &str) -> String {
        let name = crate::common::unique("conf");
        match &self.world {
            Some(world) => world.lock().expect("world").ddb.add_table(&name, key, None),
            None => {
                self.ddb
                    .create_table()
                    .table_name(&name)
                    .billing_mode(BillingMode::PayPerRequest)
                    .attribute_definitions(
                        AttributeDefinition::builder()
                            .attribute_name(key)
                            .attribute_type(ScalarAttributeType::S)
                            .build()
                            .expect("definition"),
                    )
                    .key_schema(
                        KeySchemaElement::builder()
                            .attribute_name(key)
                            .key_type(KeyType::Hash)
                            .build()
                            .expect("key"),
                    )
                    .send()
                    .await
                    .expect("create table");
                self.created.lock().expect("created").1.push(name.clone());
            }
        }
        name
    }

    async fn clean_up(&self) {
        let (queues, tables) = std::mem::take(&mut *self.created.lock().expect("created"));
        for url in queues {
            let _ = self.sqs.delete_queue().queue_url(url).send().await;
        }
        for name in tables {
            let _ = self.ddb.delete_table().table_name(name).send().await;
        }
    }
}

/// What a client observed, step by step: (step, normalised value).
#[derive(Debug, Default, Clone)]
pub struct Obs(pub Vec<(String, Value)>);

impl Obs {
    pub fn see(&mut self, step: &str, v: Value) {
        self.0.push((step.to_owned(), v));
    }
}

/// A step where the emulator differs from AWS and the model follows AWS.
pub struct Divergence {
    pub step: &'static str,
    pub model: Value,
    pub stack: Value,
    /// The AWS page that says what the model does.
    pub aws: &'static str,
}

/// An error as a client tells it apart: its code (messages differ between
/// services and emulators; the scenarios that rely on one compare it
/// explicitly).
pub fn code<E: aws_sdk_sqs::error::ProvideErrorMetadata>(e: &E) -> Value {
    json!({"error": e.code().unwrap_or("<none>")})
}

/// An error's code and message.
pub fn code_message<E: aws_sdk_sqs::error::ProvideErrorMetadata>(e: &E) -> Value {
    json!({"error": e.code().unwrap_or("<none>"), "message": e.message().unwrap_or("<none>")})
}

/// A DynamoDB attribute value as JSON (the wire form).
pub fn av(v: &AttributeValue) -> Value {
    match v {
        AttributeValue::S(s) => json!({"S": s}),
        AttributeValue::N(n) => json!({"N": n}),
        AttributeValue::Bool(b) => json!({"BOOL": b}),
        other => json!({"other": format!("{other:?}")}),
    }
}

pub fn item(i: &std::collections::HashMap<String, AttributeValue>) -> Value {
    let sorted: std::collections::BTreeMap<&String, Value> =
        i.iter().map(|(k, v)| (k, av(v))).collect();
    json!(sorted)
}

/// Runs `scenario` on the model.
fn on_model<F, Fut>(scenario: &F) -> Obs
where
    F: Fn(Backend) -> Fut,
    Fut: Future<Output = Obs>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    let obs = rt.block_on(async {
        idemq::testing::clock::simulate(UNIX_EPOCH + Duration::from_secs(1_800_000_000), 1);
        let world = Arc::new(Mutex::new(World::new(Faults::new(1, Rates::NONE), false)));
        let net = Net {
            world: Arc::clone(&world),
        };
        let (sqs, ddb) = net::clients(&net, 1);
        scenario(Backend {
            sqs,
            ddb,
            world: Some(world),
            created: Arc::default(),
        })
        .await
    });
    idemq::testing::clock::real();
    obs
}

/// Runs `scenario` on the stack, deleting what it created even when it
/// panics.
fn on_stack<F, Fut>(scenario: &F) -> Obs
where
    F: Fn(Backend) -> Fut,
    Fut: Future<Output = Obs> + Send + 'static,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let sdk = crate::common::sdk().await;
        let b = Backend {
            sqs: aws_sdk_sqs::Client::new(&sdk),
            ddb: aws_sdk_dynamodb::Client::new(&sdk),
            world: None,
            created: Arc::default(),
        };
        let run = tokio::spawn(scenario(b.clone())).await;
        b.clean_up().await;
        match run {
            Ok(obs) => obs,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    })
}

/// Runs `scenario` on both sides and compares what the client observed.
/// Returns the model's observations, for the scenario's own checks of
/// what AWS documents.
pub fn conform<F, Fut>(name: &str, scenario: F, divergences: &[Divergence]) -> Obs
where
    F: Fn(Backend) -> Fut,
    Fut: Future<Output = Obs> + Send + 'static,
{
    let model = on_model(&scenario);
    let stack = on_stack(&scenario);
    if std::env::var_os("CONFORMANCE_PRINT").is_some() {
        for (step, v) in &model.0 {
            eprintln!("{name}: {step}: model {v} / stack {}", at_or(&stack, step));
        }
    }
    // A step one side did not reach (a scenario stops early when there is
    // nothing left to observe) compares as "<not reached>".
    let mut steps: Vec<&String> = model.0.iter().map(|(s, _)| s).collect();
    steps.extend(
        stack
            .0
            .iter()
            .map(|(s, _)| s)
            .filter(|s| !model.0.iter().any(|(m, _)| m == *s)),
    );
    let absent = json!("<not reached>");
    let value = |o: &'_ Obs, step: &str| -> Value {
        o.0.iter()
            .find(|(s, _)| s == step)
            .map_or(absent.clone(), |(_, v)| v.clone())
    };
    let mut problems = Vec::new();
    for step in steps {
        let (m, s) = (value(&model, step), value(&stack, step));
        match divergences.iter().find(|d| d.step == step) {
            Some(d) => {
                if m != d.model || s != d.stack {
                    problems.push(format!(
                        "{step}: expected divergence changed (AWS: {})\n    model {m}\n    (listed {})\n    stack {s}\n    (listed {})",
                        d.aws, d.model, d.stack
                    ));
                }
            }
            None => {
                if m != s {
                    problems.push(format!("{step}: differs\n    model {m}\n    stack {s}"));
                }
            }
        }
    }
    for d in divergences {
        if !model.0.iter().chain(&stack.0).any(|(s, _)| s == d.step) {
            problems.push(format!("{}: listed divergence has no such step", d.step));
        }
    }
    assert!(
        problems.is_empty(),
        "{name}: model and stack disagree\n  {}",
        problems.join("\n  ")
    );
    model
}

fn at_or(obs: &Obs, step: &str) -> Value {
    obs.0
        .iter()
        .find(|(s, _)| s == step)
        .map_or(json!("<not reached>"), |(_, v)| v.clone())
}
