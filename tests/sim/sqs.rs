//! SQS queues, as a client observes them through the AWS JSON 1.0
//! protocol; what FIFO queues add is in [`super::fifo`]. Every behaviour
//! cites the page it follows; what is not here (move tasks from FIFO
//! queues, fair queues) is refused loudly rather than approximated.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio::time::Instant;

use super::check::{Event, History};
use super::fifo::{self, Fifo};
use super::net::Reply;

pub const ACCOUNT: &str = "000000000000";
pub const REGION: &str = "us-east-1";

/// "The maximum is 12 hours" from the receive, for a visibility timeout
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibility.html>).
pub const MAX_VISIBILITY: Duration = Duration::from_secs(12 * 3600);

/// At most 10 message attributes, and body + attributes within
/// `MaximumMessageSize`
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html>).
pub const MAX_ATTRIBUTES: usize = 10;

#[derive(Debug, Clone)]
pub struct Msg {
    pub id: String,
    pub body: String,
    /// Wire form: name -> {DataType, StringValue}.
    pub attributes: BTreeMap<String, Value>,
    /// `SentTimestamp`. A standard queue keeps it when SQS's redrive moves
    /// the message to its DLQ, and retention counts from it there too
    /// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/setting-up-dead-letter-queue-retention.html>).
    pub sent_at: SystemTime,
    pub receive_count: u32,
    pub visible_at: Instant,
    /// The newest receipt handle; older ones no longer act on the message.
    pub handle: Option<String>,
    /// When the current receive happened (the 12-hour limit counts from it).
    pub received_at: Option<Instant>,
    /// `ApproximateFirstReceiveTimestamp`: the first receive's wall time.
    pub first_received: Option<SystemTime>,
    /// `DeadLetterQueueSourceArn`, set by SQS's own redrive.
    pub source_arn: Option<String>,
    /// FIFO: `MessageGroupId`, `MessageDeduplicationId`, `SequenceNumber`.
    pub group: Option<String>,
    pub dedup_id: Option<String>,
    pub sequence: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Queue {
    pub name: String,
    pub visibility_timeout: Duration,
    pub retention: Duration,
    pub max_message_size: usize,
    /// (DLQ name, maxReceiveCount).
    pub redrive: Option<(String, u32)>,
    pub messages: BTreeMap<u64, Msg>,
    /// A FIFO queue's state: its name ends in `.fifo`.
    pub fifo: Option<Fifo>,
    /// The queue's `DelaySeconds`.
    pub delay: Duration,
}

impl Queue {
    pub fn new(name: &str, visibility_timeout: Duration, retention: Duration) -> Self {
        Self {
            name: name.into(),
            visibility_timeout,
            retention,
            // "Default: 1,048,576 bytes (1 MiB)" since SQS raised the
            // limit in 2025 (CreateQueue, `MaximumMessageSize`:
            // <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_CreateQueue.html>);
            // LocalStack agrees (tests/sim_conformance.rs).
            max_message_size: 1_048_576,
            redrive: None,
            messages: BTreeMap::new(),
            fifo: name.ends_with(".fifo").then(Fifo::default),
            delay: Duration::ZERO,
        }
    }
}

pub fn url(name: &str) -> String {
    format!("https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{name}")
}

pub fn arn(name: &str) -> String {
    format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{name}")
}

fn name_of_url(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}

fn epoch_ms(t: SystemTime) -> String {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
        .to_string()
}

/// Characters SQS accepts in a body or a String attribute value
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html>):
/// `#x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF`.
pub fn sqs_text(s: &str) -> bool {
    s.chars().all(|c| {
        matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}')
            || c >= '\u{10000}'
    })
}

/// A message move task (`StartMessageMoveTask`).
#[derive(Debug, Clone)]
pub struct MoveTask {
    pub handle: String,
    pub source: String,
    pub destination: String,
    pub rate: u32,
    pub started: Instant,
    pub started_wall: SystemTime,
    pub moved: u64,
    pub to_move: u64,
    /// RUNNING, COMPLETED or CANCELLED.
    pub status: &'static str,
}

#[derive(Debug, Default)]
pub struct Sqs {
    pub queues: BTreeMap<String, Queue>,
    next_seq: u64,
    next_handle: u64,
    /// Every move task, oldest first.
    pub tasks: Vec<MoveTask>,
    /// Messages moved by move tasks so far.
    pub moves: u64,
}

pub(super) fn err(code: &str, message: impl Into<String>) -> Reply {
    Reply::Error {
        status: 400,
        kind: format!("com.amazonaws.sqs#{code}"),
        message: message.into(),
        extra: json!({}),
    }
}

impl Sqs {
    pub fn add(&mut self, q: Queue) {
        self.queues.insert(q.name.clone(), q);
    }

    fn queue_name(&self, req: &Value) -> Result<String, Reply> {
        let name = name_of_url(req["QueueUrl"].as_str().unwrap_or_default()).to_owned();
        if self.queues.contains_key(&name) {
            Ok(name)
        } else {
            Err(err(
                "QueueDoesNotExist",
                "The specified queue does not exist.",
            ))
        }
    }

    /// SQS deletes a message whose retention has run out, "in flight or
    /// not", and never dead-letters it then
    /// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_DeleteMessage.html>:
    /// "If you leave a message in the queue for longer than the queue's
    /// configured retention period, Amazon SQS automatically deletes it").
    pub fn expire(&mut self, wall: SystemTime, history: &mut History) {
        for q in self.queues.values_mut() {
            let retention = q.retention;
            let gone: Vec<u64> = q
                .messages
                .iter()
                .filter(|(_, m)| m.sent_at + retention <= wall)
                .map(|(k, _)| *k)
                .collect();
            for k in gone {
                let m = q.messages.remove(&k).expect("present");
                history.push(Event::Expired {
                    queue: q.name.clone(),
                    body: m.body,
                });
            }
        }
    }

    /// Puts a message on a queue as SQS would on a successful send.
    pub fn enqueue(
        &mut self,
        queue: &str,
        body: String,
        attributes: BTreeMap<String, Value>,
        wall: SystemTime,
        delay: Duration,
    ) -> String {
        self.enqueue_in_group(queue, body, attributes, wall, delay, None)
            .0
    }

    /// [`Sqs::enqueue`], on a FIFO queue with its (group, deduplication
    /// id): returns its MessageId and, on a FIFO queue, its sequence number.
    pub fn enqueue_in_group(
        &mut self,
        queue: &str,
        body: String,
        attributes: BTreeMap<String, Value>,
        wall: SystemTime,
        delay: Duration,
        fifo: Option<(String, String)>,
    ) -> (String, Option<String>) {
        self.next_seq += 1;
        let id = format!("{queue}-m{:06}", self.next_seq);
        let sequence = fifo.as_ref().map(|_| fifo::sequence_number(self.next_seq));
        let (group, dedup_id) = fifo.unzip();
        let q = self.queues.get_mut(queue).expect("queue");
        q.messages.insert(
            self.next_seq,
            Msg {
                id: id.clone(),
                body,
                attributes,
                sent_at: wall,
                receive_count: 0,
                visible_at: Instant::now() + delay,
                handle: None,
                received_at: None,
                first_received: None,
                source_arn: None,
                group,
                dedup_id,
                sequence: sequence.clone(),
            },
        );
        (id, sequence)
    }

    /// One send (`SendMessage`, or an entry of `SendMessageBatch`): checked,
    /// deduplicated on a FIFO queue, enqueued; the answer's fields.
    fn send(
        &mut self,
        name: &str,
        entry: &Value,
        wall: SystemTime,
        history: &mut History,
    ) -> Result<Value, Reply> {
        let q = &self.queues[name];
        let (body, attributes) = Self::check_send(q, entry)?;
        let Some(state) = &q.fifo else {
            let delay = entry["DelaySeconds"]
                .as_u64()
                .map_or(q.delay, Duration::from_secs);
            let id = self.enqueue(name, body.clone(), attributes, wall, delay);
            history.push(Event::Sent {
                queue: name.to_owned(),
                message_id: id.clone(),
                body,
            });
            return Ok(json!({"MessageId": id, "MD5OfMessageBody": ""}));
        };
        let (group, dedup) = fifo::check_send(state, entry, &body)?;
        let delay = q.delay;
        let now = Instant::now();
        let state = self
            .queues
            .get_mut(name)
            .and_then(|q| q.fifo.as_mut())
            .expect("fifo");
        if let Some((id, sequence)) = fifo::deduplicate(state, &dedup, now) {
            return Ok(
                json!({"MessageId": id, "MD5OfMessageBody": "", "SequenceNumber": sequence}),
            );
        }
        let (id, sequence) = self.enqueue_in_group(
            name,
            body.clone(),
            attributes,
            wall,
            delay,
            Some((group, dedup.clone())),
        );
        let sequence = sequence.expect("a FIFO message has a sequence number");
        let state = self
            .queues
            .get_mut(name)
            .and_then(|q| q.fifo.as_mut())
            .expect("fifo");
        fifo::accept(state, dedup, id.clone(), sequence.clone(), now);
        history.push(Event::Sent {
            queue: name.to_owned(),
            message_id: id.clone(),
            body,
        });
        Ok(json!({"MessageId": id, "MD5OfMessageBody": "", "SequenceNumber": sequence}))
    }

    /// Validates one entry of a send (body and attributes) against the
    /// queue's limits; the error code is the one SQS returns.
    fn check_send(q: &Queue, entry: &Value) -> Result<(String, BTreeMap<String, Value>), Reply> {
        let body = entry["MessageBody"].as_str().unwrap_or_default().to_owned();
        if body.is_empty() {
            return Err(err(
                "InvalidParameterValue",
                "The request must contain the parameter MessageBody.",
            ));
        }
        if !sqs_text(&body) {
            return Err(err("InvalidMessageContents", "Invalid characters found."));
        }
        let mut attributes = BTreeMap::new();
        let mut size = body.len();
        if let Some(map) = entry["MessageAttributes"].as_object() {
            if map.len() > MAX_ATTRIBUTES {
                return Err(err(
                    "InvalidParameterValue",
                    format!(
                        "Number of message attributes [{}] exceeds the allowed maximum [{MAX_ATTRIBUTES}].",
                        map.len()
                    ),
                ));
            }
            for (name, v) in map {
                let value = v["StringValue"].as_str().unwrap_or_default();
                let data_type = v["DataType"].as_str().unwrap_or_default();
                if v.get("BinaryValue").is_some() {
                    return Err(err(
                        "InvalidParameterValue",
                        "binary attributes are not modelled",
                    ));
                }
                if !sqs_text(value) {
                    return Err(err(
                        "InvalidParameterValue",
                        format!(
                            "Message attribute '{name}' must contain non-empty message attribute value for message attribute type 'String'."
                        ),
                    ));
                }
                size += name.len() + data_type.len() + value.len();
                attributes.insert(
                    name.clone(),
                    json!({"DataType": data_type, "StringValue": value}),
                );
            }
        }
        if size > q.max_message_size {
            return Err(err(
                "InvalidParameterValue",
                format!(
                    "One or more parameters are invalid. Reason: Message must be shorter than {} bytes.",
                    q.max_message_size
                ),
            ));
        }
        if q.fifo.is_none() && entry.get("MessageGroupId").is_some() {
            // A group on a standard queue makes it a fair queue
            // (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/FIFO-key-terms.html>).
            return Err(err("InvalidParameterValue", "fair queues are not modelled"));
        }
        Ok((body, attributes))
    }

    pub fn apply(
        &mut self,
        op: &str,
        req: &Value,
        wall: SystemTime,
        history: &mut History,
    ) -> Reply {
        self.expire(wall, history);
        self.move_messages(wall, history);
        match op {
            "StartMessageMoveTask" => self.start_move_task(req, wall),
            "ListMessageMoveTasks" => {
                let source = req["SourceArn"].as_str().unwrap_or_default();
                let max = req["MaxResults"].as_u64().unwrap_or(1) as usize;
                let results: Vec<Value> = self
                    .tasks
                    .iter()
                    .rev()
                    .filter(|t| arn(&t.source) == source)
                    .take(max)
                    .map(|t| {
                        json!({
                            "TaskHandle": t.handle, "Status": t.status,
                            "SourceArn": arn(&t.source), "DestinationArn": arn(&t.destination),
                            "MaxNumberOfMessagesPerSecond": t.rate,
                            "ApproximateNumberOfMessagesMoved": t.moved,
                            "ApproximateNumberOfMessagesToMove": t.to_move,
                            "StartedTimestamp": t.started_wall.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64,
                        })
                    })
                    .collect();
                Reply::Ok(json!({"Results": results}))
            }
            "CancelMessageMoveTask" => {
                let handle = req["TaskHandle"].as_str().unwrap_or_default();
                match self
                    .tasks
                    .iter_mut()
                    .find(|t| t.handle == handle && t.status == "RUNNING")
                {
                    Some(t) => {
                        t.status = "CANCELLED";
                        Reply::Ok(json!({"ApproximateNumberOfMessagesMoved": t.moved}))
                    }
                    None => err(
                        "ResourceNotFoundException",
                        "The task does not exist or is not running.",
                    ),
                }
            }
            "GetQueueUrl" => {
                let name = req["QueueName"].as_str().unwrap_or_default();
                if self.queues.contains_key(name) {
                    Reply::Ok(json!({"QueueUrl": url(name)}))
                } else {
                    err("QueueDoesNotExist", "The specified queue does not exist.")
                }
            }
            "GetQueueAttributes" => self.get_attributes(req),
            "ListDeadLetterSourceQueues" => {
                let Ok(dlq) = self.queue_name(req) else {
                    return err("QueueDoesNotExist", "The specified queue does not exist.");
                };
                let urls: Vec<String> = self
                    .queues
                    .values()
                    .filter(|q| q.redrive.as_ref().is_some_and(|(d, _)| *d == dlq))
                    .map(|q| url(&q.name))
                    .collect();
                Reply::Ok(json!({"queueUrls": urls}))
            }
            "SendMessage" => {
                let name = match self.queue_name(req) {
                    Ok(n) => n,
                    Err(e) => return e,
                };
                match self.send(&name, req, wall, history) {
                    Ok(answer) => Reply::Ok(answer),
                    Err(e) => e,
                }
            }
            "SendMessageBatch" => {
                let name = match self.queue_name(req) {
                    Ok(n) => n,
                    Err(e) => return e,
                };
                let entries = req["Entries"].as_array().cloned().unwrap_or_default();
                if entries.is_empty() || entries.len() > 10 {
                    return err("TooManyEntriesInBatchRequest", "1 to 10 entries");
                }
                let (mut ok, mut failed) = (Vec::new(), Vec::new());
                for e in &entries {
                    let id = e["Id"].as_str().unwrap_or_default();
                    match self.send(&name, e, wall, history) {
                        Ok(mut answer) => {
                            answer["Id"] = Value::String(id.to_owned());
                            ok.push(answer);
                        }
                        Err(Reply::Error { kind, message, .. }) => failed.push(json!({
                            "Id": id, "SenderFault": true,
                            "Code": kind.rsplit('#').next().unwrap_or_default(), "Message": message
                        })),
                        Err(other) => return other,
                    }
                }
                Reply::Ok(json!({"Successful": ok, "Failed": failed}))
            }
            "ReceiveMessage" => self.receive(req, wall, history),
            "DeleteMessage" => {
                let name = match self.queue_name(req) {
                    Ok(n) => n,
                    Err(e) => return e,
                };
                let handle = req["ReceiptHandle"].as_str().unwrap_or_default();
                match self.delete(&name, handle, history, "DeleteMessage") {
                    Ok(()) => Reply::Ok(json!({})),
                    Err(e) => e,
                }
            }
            "DeleteMessageBatch" => {
                let name = match self.queue_name(req) {
                    Ok(n) => n,
                    Err(e) => return e,
                };
                let (mut ok, mut failed) = (Vec::new(), Vec::new());
                for e in req["Entries"].as_array().cloned().unwrap_or_default() {
                    let id = e["Id"].as_str().unwrap_or_default().to_owned();
                    let handle = e["ReceiptHandle"].as_str().unwrap_or_default();
                    match self.delete(&name, handle, history, "DeleteMessageBatch") {
                        Ok(()) => ok.push(json!({"Id": id})),
                        Err(_) => failed.push(json!({"Id": id, "SenderFault": true, "Code": "ReceiptHandleIsInvalid", "Message": "invalid"})),
                    }
                }
                Reply::Ok(json!({"Successful": ok, "Failed": failed}))
            }
            "ChangeMessageVisibility" => {
                let name = match self.queue_name(req) {
                    Ok(n) => n,
                    Err(e) => return e,
                };
                let handle = req["ReceiptHandle"].as_str().unwrap_or_default();
                let secs = req["VisibilityTimeout"].as_u64().unwrap_or(0);
                match self.change_visibility(&name, handle, Duration::from_secs(secs)) {
                    Ok(()) => Reply::Ok(json!({})),
                    Err((code, m)) => err(code, m),
                }
            }
            "ChangeMessageVisibilityBatch" => {
                let name = match self.queue_name(req) {
                    Ok(n) => n,
                    Err(e) => return e,
                };
                let (mut ok, mut failed) = (Vec::new(), Vec::new());
                for e in req["Entries"].as_array().cloned().unwrap_or_default() {
                    let id = e["Id"].as_str().unwrap_or_default().to_owned();
                    let handle = e["ReceiptHandle"].as_str().unwrap_or_default();
                    let secs = e["VisibilityTimeout"].as_u64().unwrap_or(0);
                    match self.change_visibility(&name, handle, Duration::from_secs(secs)) {
                        Ok(()) => ok.push(json!({"Id": id})),
                        Err((code, m)) => failed.push(
                            json!({"Id": id, "SenderFault": true, "Code": code, "Message": m}),
                        ),
                    }
                }
                Reply::Ok(json!({"Successful": ok, "Failed": failed}))
            }
            other => err("UnsupportedOperation", format!("{other} is not modelled")),
        }
    }

    /// `StartMessageMoveTask`: from a queue that is some queue's DLQ, one
    /// task at a time per queue
    /// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_StartMessageMoveTask.html>).
    /// Only with a `DestinationArn`: where a letter idemq sent itself (no
    /// `DeadLetterQueueSourceArn`) would go without one is not documented,
    /// so the model refuses rather than guess.
    fn start_move_task(&mut self, req: &Value, wall: SystemTime) -> Reply {
        let source = name_of_url(req["SourceArn"].as_str().unwrap_or_default())
            .rsplit(':')
            .next()
            .unwrap_or_default()
            .to_owned();
        let is_dlq = self
            .queues
            .values()
            .any(|q| q.redrive.as_ref().is_some_and(|(d, _)| *d == source));
        if !self.queues.contains_key(&source) || !is_dlq {
            return err(
                "InvalidParameterValue",
                "Source queue must be configured as a Dead Letter Queue.",
            );
        }
        if self.queues[&source].fifo.is_some() {
            return err(
                "UnsupportedOperation",
                "move tasks from a FIFO queue are not modelled",
            );
        }
        let Some(destination) = req["DestinationArn"]
            .as_str()
            .and_then(|a| a.rsplit(':').next())
            .map(str::to_owned)
        else {
            return err(
                "UnsupportedOperation",
                "a move task without DestinationArn is not modelled",
            );
        };
        if !self.queues.contains_key(&destination) {
            return err(
                "ResourceNotFoundException",
                "The destination queue does not exist.",
            );
        }
        if self
            .tasks
            .iter()
            .any(|t| t.source == source && t.status == "RUNNING")
        {
            return err(
                "UnsupportedOperation",
                "There is already a task running. Only one active task is allowed for a source queue arn at a given time.",
            );
        }
        self.next_handle += 1;
        let handle = format!("task-{}", self.next_handle);
        // "If this field is left blank, the system will optimize the rate":
        // 100 a second here; at most 500.
        let rate = req["MaxNumberOfMessagesPerSecond"]
            .as_u64()
            .unwrap_or(100)
            .clamp(1, 500) as u32;
        self.tasks.push(MoveTask {
            handle: handle.clone(),
            source: source.clone(),
            destination,
            rate,
            started: Instant::now(),
            started_wall: wall,
            moved: 0,
            to_move: self.queues[&source].messages.len() as u64,
            status: "RUNNING",
        });
        Reply::Ok(json!({"TaskHandle": handle}))
    }

    /// Moves what each running task has had time to move (its rate times
    /// the time since it started), oldest visible letters first. A moved
    /// message is a new message: "All redriven messages are considered new
    /// messages and are assigned a new messageID", enqueue time and
    /// retention restart
    /// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-dead-letter-queue-redrive.html>);
    /// its message attributes go with it. A task moves as many messages
    /// as its queue held when it started
    /// (`ApproximateNumberOfMessagesToMove`), then is COMPLETED; so letters
    /// that die again meanwhile wait for the next task (letters in flight
    /// wait for their visibility to end).
    pub fn move_messages(&mut self, wall: SystemTime, history: &mut History) {
        let now = Instant::now();
        for i in 0..self.tasks.len() {
            if self.tasks[i].status != "RUNNING" {
                continue;
            }
            let t = self.tasks[i].clone();
            let due = (now.duration_since(t.started).as_secs_f64() * f64::from(t.rate)) as u64;
            let mut moved = t.moved;
            while moved < due.min(t.to_move) {
                let q = self.queues.get_mut(&t.source).expect("source");
                let Some(seq) = q
                    .messages
                    .iter()
                    .find(|(_, m)| m.visible_at <= now)
                    .map(|(k, _)| *k)
                else {
                    break;
                };
                let m = q.messages.remove(&seq).expect("present");
                let id = self.enqueue(
                    &t.destination,
                    m.body.clone(),
                    m.attributes.clone(),
                    wall,
                    Duration::ZERO,
                );
                // The new copy first: the checker sees a copy living on.
                history.push(Event::Sent {
                    queue: t.destination.clone(),
                    message_id: id,
                    body: m.body.clone(),
                });
                history.push(Event::Deleted {
                    queue: t.source.clone(),
                    message_id: m.id,
                    body: m.body,
                    by: "move task".into(),
                });
                moved += 1;
                self.moves += 1;
            }
            let task = &mut self.tasks[i];
            task.moved = moved;
            if moved >= t.to_move || self.queues[&t.source].messages.is_empty() {
                task.status = "COMPLETED";
            }
        }
    }

    fn get_attributes(&self, req: &Value) -> Reply {
        let name = match self.queue_name(req) {
            Ok(n) => n,
            Err(e) => return e,
        };
        let q = &self.queues[&name];
        let now = Instant::now();
        let visible = q.messages.values().filter(|m| m.visible_at <= now).count();
        let mut all = serde_json::Map::new();
        let mut put = |k: &str, v: String| {
            all.insert(k.into(), Value::String(v));
        };
        put("QueueArn", arn(&name));
        put(
            "VisibilityTimeout",
            q.visibility_timeout.as_secs().to_string(),
        );
        put("MessageRetentionPeriod", q.retention.as_secs().to_string());
        put("MaximumMessageSize", q.max_message_size.to_string());
        put("ApproximateNumberOfMessages", visible.to_string());
        put(
            "ApproximateNumberOfMessagesNotVisible",
            (q.messages.len() - visible).to_string(),
        );
        put("ApproximateNumberOfMessagesDelayed", "0".into());
        put("DelaySeconds", q.delay.as_secs().to_string());
        if let Some(f) = &q.fifo {
            put("FifoQueue", "true".into());
            put(
                "ContentBasedDeduplication",
                f.content_based_deduplication.to_string(),
            );
        }
        put("ReceiveMessageWaitTimeSeconds", "0".into());
        if let Some((dlq, max)) = &q.redrive {
            put(
                "RedrivePolicy",
                json!({"deadLetterTargetArn": arn(dlq), "maxReceiveCount": max}).to_string(),
            );
        }
        // Only what was asked for ("All" for everything); a standard queue
        // has no FifoQueue attribute.
        let asked: Vec<&str> = req["AttributeNames"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !asked.contains(&"All") {
            all.retain(|k, _| asked.contains(&k.as_str()));
        }
        Reply::Ok(json!({"Attributes": all}))
    }

    /// A receive. A message whose receive count has reached the source's
    /// `maxReceiveCount` is moved to the DLQ by the receive that would have
    /// delivered it once more, keeping its MessageId
    /// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-dead-letter-queues.html>:
    /// "when the ReceiveCount for a message exceeds the maxReceiveCount for
    /// a queue, Amazon SQS moves the message to a dead-letter queue (with
    /// its original message ID)").
    fn receive(&mut self, req: &Value, wall: SystemTime, history: &mut History) -> Reply {
        let name = match self.queue_name(req) {
            Ok(n) => n,
            Err(e) => return e,
        };
        let max = req["MaxNumberOfMessages"]
            .as_u64()
            .unwrap_or(1)
            .clamp(1, 10) as usize;
        let visibility = req["VisibilityTimeout"]
            .as_u64()
            .map(Duration::from_secs)
            .unwrap_or(self.queues[&name].visibility_timeout);
        let system: Vec<String> = ["MessageSystemAttributeNames", "AttributeNames"]
            .iter()
            .flat_map(|k| req[*k].as_array().cloned().unwrap_or_default())
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        let wanted: Vec<String> = req["MessageAttributeNames"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let messages = self.take_visible(&name, max, visibility, wall, history);
        let out: Vec<Value> = messages
            .iter()
            .map(|m| to_wire(m, &system, &wanted))
            .collect();
        Reply::Ok(json!({"Messages": out}))
    }

    /// Receives up to `max` visible messages (also for Lambda's event
    /// source mapping, which polls on the function's behalf).
    pub fn take_visible(
        &mut self,
        name: &str,
        max: usize,
        visibility: Duration,
        wall: SystemTime,
        history: &mut History,
    ) -> Vec<Msg> {
        self.expire(wall, history);
        let now = Instant::now();
        let redrive = self.queues[name].redrive.clone();
        let mut out = Vec::new();
        let mut moved = Vec::new();
        if self.queues[name].fifo.is_some() {
            let q = self.queues.get_mut(name).expect("queue");
            let (take, to_move) = fifo::select(q, now, max, redrive.as_ref().map(|(_, n)| *n));
            moved = to_move;
            for seq in take {
                let m = q.messages.get_mut(&seq).expect("present");
                self.next_handle += 1;
                m.receive_count += 1;
                m.handle = Some(format!("rh-{}-{}", m.id, self.next_handle));
                m.visible_at = now + visibility;
                m.received_at = Some(now);
                out.push(m.clone());
            }
        } else {
            let q = self.queues.get_mut(name).expect("queue");
            for (seq, m) in q.messages.iter_mut() {
                if out.len() == max {
                    break;
                }
                if m.visible_at > now {
                    continue;
                }
                if let Some((_, max_receives)) = &redrive
                    && m.receive_count >= *max_receives
                {
                    moved.push(*seq);
                    continue;
                }
                self.next_handle += 1;
                m.receive_count += 1;
                m.handle = Some(format!("rh-{}-{}", m.id, self.next_handle));
                m.visible_at = now + visibility;
                m.received_at = Some(now);
                m.first_received.get_or_insert(wall);
                out.push(m.clone());
            }
        }
        if let Some((dlq, _)) = redrive {
            for seq in moved {
                let mut m = self
                    .queues
                    .get_mut(name)
                    .and_then(|q| q.messages.remove(&seq))
                    .expect("present");
                history.push(Event::Redriven {
                    from: name.to_owned(),
                    message_id: m.id.clone(),
                    body: m.body.clone(),
                });
                m.source_arn = Some(arn(name));
                m.receive_count = 0;
                m.handle = None;
                m.received_at = None;
                m.visible_at = now;
                self.next_seq += 1;
                let target = self.queues.get_mut(&dlq).expect("dlq");
                assert_eq!(
                    target.fifo.is_some(),
                    m.group.is_some(),
                    "a FIFO queue's DLQ is FIFO, a standard queue's standard"
                );
                if let Some(state) = target.fifo.as_mut() {
                    // Its deduplication id becomes its MessageId, and its
                    // enqueue time restarts (module docs of `fifo`).
                    m.dedup_id = Some(m.id.clone());
                    m.sent_at = wall;
                    m.sequence = Some(fifo::sequence_number(self.next_seq));
                    if fifo::deduplicate(state, &m.id, now).is_some() {
                        // A copy of it is already there (idemq sent one,
                        // deduplicated by this MessageId).
                        history.push(Event::Deleted {
                            queue: dlq.clone(),
                            message_id: m.id.clone(),
                            body: m.body.clone(),
                            by: "FIFO deduplication".into(),
                        });
                        continue;
                    }
                    let seq = m.sequence.clone().expect("sequence");
                    fifo::accept(state, m.id.clone(), m.id.clone(), seq, now);
                }
                target.messages.insert(self.next_seq, m);
            }
        }
        out
    }

    /// Deletes by receipt handle. Only the newest handle deletes; an older
    /// one "will still succeed, but the message might not be deleted"
    /// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_DeleteMessage.html>);
    /// a message already gone is a success too.
    pub fn delete(
        &mut self,
        queue: &str,
        handle: &str,
        history: &mut History,
        by: &str,
    ) -> Result<(), Reply> {
        if !handle.starts_with("rh-") {
            return Err(err(
                "ReceiptHandleIsInvalid",
                "The input receipt handle is invalid.",
            ));
        }
        let q = self.queues.get_mut(queue).expect("queue");
        let found = q
            .messages
            .iter()
            .find(|(_, m)| m.handle.as_deref() == Some(handle))
            .map(|(k, _)| *k);
        if let Some(k) = found {
            let m = q.messages.remove(&k).expect("present");
            history.push(Event::Deleted {
                queue: queue.to_owned(),
                message_id: m.id,
                body: m.body,
                by: by.to_owned(),
            });
        }
        Ok(())
    }

    /// Sets a received message's visibility timeout from now. The handle
    /// must be the newest and the message in flight (else
    /// `MessageNotInflight`), and the total time since the receive may not
    /// pass 12 hours
    /// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibility.html>).
    pub fn change_visibility(
        &mut self,
        queue: &str,
        handle: &str,
        timeout: Duration,
    ) -> Result<(), (&'static str, String)> {
        let now = Instant::now();
        let q = self.queues.get_mut(queue).expect("queue");
        let Some(m) = q
            .messages
            .values_mut()
            .find(|m| m.handle.as_deref() == Some(handle))
        else {
            // A well-formed handle of a message that is gone (deleted, or
            // received again since): SQS answers InvalidParameterValue,
            // "Message does not exist or is not available for visibility
            // timeout change" (as reported from AWS in
            // <https://github.com/vmihailenco/taskq/issues/29>; LocalStack
            // agrees, tests/sim_conformance.rs). ReceiptHandleIsInvalid is
            // for a handle SQS cannot read
            // (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibility.html>).
            return Err(if handle.starts_with("rh-") {
                (
                    "InvalidParameterValue",
                    format!(
                        "Value {handle} for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change."
                    ),
                )
            } else {
                (
                    "ReceiptHandleIsInvalid",
                    "The input receipt handle is invalid.".into(),
                )
            });
        };
        if m.visible_at <= now {
            return Err((
                "MessageNotInflight",
                "The message referred to isn't in flight.".into(),
            ));
        }
        let since = now - m.received_at.unwrap_or(now);
        if timeout > MAX_VISIBILITY || since + timeout > MAX_VISIBILITY {
            return Err((
                "InvalidParameterValue",
                format!(
                    "Value {} for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]",
                    timeout.as_secs()
                ),
            ));
        }
        m.visible_at = now + timeout;
        Ok(())
    }
}

/// A message as ReceiveMessage returns it: system attributes and message
/// attributes only when asked for
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ReceiveMessage.html>).
pub fn to_wire(m: &Msg, system: &[String], wanted: &[String]) -> Value {
    let all = system.iter().any(|s| s == "All");
    let mut sys = serde_json::Map::new();
    let mut put = |k: &str, v: String| {
        if all || system.iter().any(|s| s == k) {
            sys.insert(k.into(), Value::String(v));
        }
    };
    put("ApproximateReceiveCount", m.receive_count.to_string());
    put("SentTimestamp", epoch_ms(m.sent_at));
    put("SenderId", "AIDASIMULATED".into());
    if let Some(t) = m.first_received {
        put("ApproximateFirstReceiveTimestamp", epoch_ms(t));
    }
    if let Some(a) = &m.source_arn {
        put("DeadLetterQueueSourceArn", a.clone());
    }
    for (k, v) in [
        ("MessageGroupId", &m.group),
        ("MessageDeduplicationId", &m.dedup_id),
        ("SequenceNumber", &m.sequence),
    ] {
        if let Some(v) = v {
            put(k, v.clone());
        }
    }
    let every = wanted.iter().any(|w| w == "All" || w == ".*");
    let attrs: serde_json::Map<String, Value> = m
        .attributes
        .iter()
        .filter(|(k, _)| every || wanted.iter().any(|w| w == *k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut out = json!({
        "MessageId": m.id,
        "ReceiptHandle": m.handle.clone().unwrap_or_default(),
        "MD5OfBody": "",
        "Body": m.body,
        "Attributes": sys,
    });
    if !attrs.is_empty() {
        out["MessageAttributes"] = Value::Object(attrs);
    }
    out
}
