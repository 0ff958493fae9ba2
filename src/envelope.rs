//! Jobs that arrive wrapped: SNS → SQS and EventBridge → SQS envelopes.
//!
//! A queue subscribed to an SNS topic (raw message delivery off) receives
//! each publish as an SNS notification document whose `Message` is what the
//! producer published; its `MessageId`, `Timestamp` and `Signature` are new on
//! every publish
//! (<https://docs.aws.amazon.com/sns/latest/dg/sns-large-payload-raw-message-delivery.html>,
//! <https://docs.aws.amazon.com/sns/latest/dg/http-notification-json.html>).
//! A queue that is the target of an EventBridge rule receives the whole
//! event, whose `detail` is what the producer put and whose `id` and `time`
//! are minted by EventBridge
//! (<https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-events-structure.html>).
//! Hashing such a body as it is would make a producer's retry of the same
//! job a different payload: a conflict, dead-lettered.
//!
//! With [`Envelope::Sns`] or [`Envelope::EventBridge`] (`IDEMQ_ENVELOPE`),
//! the job is the inner message: the handler decodes it, the payload hash
//! covers it alone, and the job id is found in the envelope
//! ([`JobIdResolver::resolve_job`](crate::JobIdResolver::resolve_job), the one place a message becomes a job).

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value};

use crate::attribute::JOB_ID_ATTRIBUTE;

/// How a job is wrapped in the SQS message body.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Envelope {
    /// The body is the job (a producer's `SendMessage`, or SNS with raw
    /// message delivery on).
    #[default]
    None,
    /// The body is an SNS notification (an SQS subscription with raw
    /// message delivery off): the job is its `Message`.
    Sns,
    /// The body is an EventBridge event (a rule's SQS target without an
    /// input transformer): the job is its `detail`.
    EventBridge,
}

impl Envelope {
    /// The variable that selects the envelope: `none` (default), `sns` or
    /// `eventbridge`.
    pub const ENV_VAR: &'static str = "IDEMQ_ENVELOPE";

    /// How errors name it: `SNS`, `EventBridge`, `plain`.
    const fn label(self) -> &'static str {
        match self {
            Self::None => "plain",
            Self::Sns => "SNS",
            Self::EventBridge => "EventBridge",
        }
    }

    /// The `IDEMQ_ENVELOPE` value that selects it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Sns => "sns",
            Self::EventBridge => "eventbridge",
        }
    }

    /// The job inside `body`: its payload, and what the envelope says of
    /// its identity. Never fails for [`Envelope::None`].
    ///
    /// ```
    /// use idemq::envelope::Envelope;
    /// let body = r#"{"Type":"Notification","MessageId":"m-1","Message":"{\"n\":1}",
    ///     "MessageAttributes":{"idemq-job-id":{"Type":"String","Value":"job-7"}}}"#;
    /// let job = Envelope::Sns.open(body).unwrap();
    /// assert_eq!(job.payload, r#"{"n":1}"#);
    /// assert_eq!(job.job_id_attribute.as_deref(), Some("job-7"));
    /// assert_eq!(job.envelope_id.as_deref(), Some("m-1"));
    /// ```
    pub fn open(self, body: &str) -> Result<Opened<'_>, EnvelopeError> {
        match self {
            Self::None => Ok(Opened {
                payload: Cow::Borrowed(body),
                job_id_attribute: None,
                envelope_id: None,
            }),
            Self::Sns => open_sns(body),
            Self::EventBridge => open_eventbridge(body),
        }
    }
}

impl fmt::Display for Envelope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Envelope {
    type Err = UnknownEnvelope;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "none" => Ok(Self::None),
            "sns" => Ok(Self::Sns),
            "eventbridge" => Ok(Self::EventBridge),
            _ => Err(UnknownEnvelope),
        }
    }
}

/// A value of `IDEMQ_ENVELOPE` that names no envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("expected one of none, sns, eventbridge")]
pub struct UnknownEnvelope;

/// The job inside a message body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened<'a> {
    /// What the handler decodes and the payload hash covers: the SNS
    /// `Message` byte for byte, or the EventBridge `detail` as canonical
    /// JSON (see [`canonical_json`]) with every number exactly as the event
    /// wrote it where an f64 would round it.
    pub payload: Cow<'a, str>,
    /// The `idemq-job-id` SNS message attribute (inside the envelope).
    pub job_id_attribute: Option<String>,
    /// The SNS `MessageId` or the EventBridge event `id`: new on every
    /// publish, the same on SNS's or EventBridge's own delivery retries and
    /// on every SQS redelivery and redrive (it is in the body).
    pub envelope_id: Option<String>,
}

/// An envelope that does not parse. Permanent: redelivering the message
/// cannot change its body. The text names fields and JSON types only, never
/// a value from the body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    #[error(
        "{label} envelope: the body is not JSON ({detail}){hint}",
        label = envelope.label(),
        hint = raw_hint(*envelope)
    )]
    /// The body is not JSON.
    NotJson {
        /// The envelope expected.
        envelope: Envelope,
        /// The error's class and position, without serde's quoted values.
        detail: String,
    },
    #[error(
        "{label} envelope: the body is a JSON {found}, not an object{hint}",
        label = envelope.label(),
        hint = raw_hint(*envelope)
    )]
    /// The body is JSON but not an object.
    NotAnObject {
        /// The envelope expected.
        envelope: Envelope,
        /// The JSON type found.
        found: &'static str,
    },
    #[error(
        "{label} envelope: no `{field}` field{hint}",
        label = envelope.label(),
        hint = raw_hint(*envelope)
    )]
    /// A field the envelope must have is absent.
    Missing {
        /// The envelope expected.
        envelope: Envelope,
        /// The field's name.
        field: &'static str,
    },
    #[error(
        "{label} envelope: `{field}` is a JSON {found}; expected a {expected}",
        label = envelope.label()
    )]
    /// A field has the wrong JSON type.
    WrongType {
        /// The envelope expected.
        envelope: Envelope,
        /// The field's name.
        field: &'static str,
        /// The JSON type found.
        found: &'static str,
        /// The JSON type the envelope's format has there.
        expected: &'static str,
    },
    /// A body whose `Type` is not `Notification`: a subscription or
    /// unsubscription confirmation (delivered to the queue when the topic is
    /// in another account), or something that is not SNS's at all.
    #[error(
        "SNS envelope: Type is {found}, not Notification: no job in it{}",
        if *found == "SubscriptionConfirmation" {
            " (confirm the subscription with its SubscribeURL or ConfirmSubscription; idemq does not)"
        } else {
            ""
        }
    )]
    NotANotification {
        /// `SubscriptionConfirmation`, `UnsubscribeConfirmation`, or
        /// `an unknown type` (the value is not echoed).
        found: &'static str,
    },
    #[error(
        "SNS envelope: message attribute {JOB_ID_ATTRIBUTE} is of type {found}; expected String or Number"
    )]
    /// The SNS `idemq-job-id` message attribute is neither a String nor a
    /// Number.
    JobIdAttributeType {
        /// `Binary`, `String.Array`, or `an unknown type`.
        found: &'static str,
    },
}

fn raw_hint(envelope: Envelope) -> &'static str {
    match envelope {
        Envelope::Sns => {
            " (IDEMQ_ENVELOPE=sns expects SNS notifications: is raw message delivery on for this \
             subscription, or is something else sending to the queue?)"
        }
        Envelope::EventBridge => {
            " (IDEMQ_ENVELOPE=eventbridge expects whole EventBridge events: does the rule's target \
             have an input transformer or input path, or is something else sending to the queue?)"
        }
        Envelope::None => "",
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn parse_object(envelope: Envelope, body: &str) -> Result<Map<String, Value>, EnvelopeError> {
    let doc: Value = serde_json::from_str(body).map_err(|e| {
        use serde_json::error::Category;
        let class = match e.classify() {
            Category::Io => "I/O error",
            Category::Syntax => "syntax error",
            Category::Data => "data error",
            Category::Eof => "unexpected end of input",
        };
        EnvelopeError::NotJson {
            envelope,
            detail: format!("{class} at line {} column {}", e.line(), e.column()),
        }
    })?;
    match doc {
        Value::Object(map) => Ok(map),
        other => Err(EnvelopeError::NotAnObject {
            envelope,
            found: kind(&other),
        }),
    }
}

/// The string at `field`, or why there is none.
fn string_field(
    envelope: Envelope,
    doc: &mut Map<String, Value>,
    field: &'static str,
) -> Result<String, EnvelopeError> {
    named_string_field(envelope, doc, field, field)
}

/// The string at `key`, or why there is none, naming it `field` (its path).
fn named_string_field(
    envelope: Envelope,
    doc: &mut Map<String, Value>,
    key: &str,
    field: &'static str,
) -> Result<String, EnvelopeError> {
    match doc.remove(key) {
        None => Err(EnvelopeError::Missing { envelope, field }),
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(EnvelopeError::WrongType {
            envelope,
            field,
            found: kind(&other),
            expected: "string",
        }),
    }
}

/// An SNS notification as SNS delivers it to an SQS queue with raw message
/// delivery off: `Type` `Notification`, `MessageId`, `Message` (the
/// published string), and the publish's `MessageAttributes` as
/// `{"name": {"Type": "String", "Value": "…"}}`
/// (<https://docs.aws.amazon.com/sns/latest/dg/sns-large-payload-raw-message-delivery.html>).
/// `TopicArn`, `Timestamp`, `Signature` and the URLs are not needed to find
/// the job and are not checked (idemq does not verify signatures: the
/// queue's policy decides who may send to it).
fn open_sns(body: &str) -> Result<Opened<'static>, EnvelopeError> {
    const E: Envelope = Envelope::Sns;
    let mut doc = parse_object(E, body)?;
    let kind_of_message = string_field(E, &mut doc, "Type")?;
    if kind_of_message != "Notification" {
        let found = match kind_of_message.as_str() {
            "SubscriptionConfirmation" => "SubscriptionConfirmation",
            "UnsubscribeConfirmation" => "UnsubscribeConfirmation",
            _ => "an unknown type",
        };
        return Err(EnvelopeError::NotANotification { found });
    }
    let message_id = string_field(E, &mut doc, "MessageId")?;
    let message = string_field(E, &mut doc, "Message")?;
    let job_id_attribute = match doc.remove("MessageAttributes") {
        None | Some(Value::Null) => None,
        Some(Value::Object(mut attributes)) => match attributes.remove(JOB_ID_ATTRIBUTE) {
            None => None,
            Some(Value::Object(mut attribute)) => {
                let field = "MessageAttributes.idemq-job-id.Type";
                let data_type = match attribute.remove("Type") {
                    Some(Value::String(t)) => t,
                    None => return Err(EnvelopeError::Missing { envelope: E, field }),
                    Some(other) => {
                        return Err(EnvelopeError::WrongType {
                            envelope: E,
                            field,
                            found: kind(&other),
                            expected: "string",
                        });
                    }
                };
                match data_type.as_str() {
                    "String" | "Number" => {}
                    "Binary" => return Err(EnvelopeError::JobIdAttributeType { found: "Binary" }),
                    "String.Array" => {
                        return Err(EnvelopeError::JobIdAttributeType {
                            found: "String.Array",
                        });
                    }
                    _ => {
                        return Err(EnvelopeError::JobIdAttributeType {
                            found: "an unknown type",
                        });
                    }
                }
                Some(named_string_field(
                    E,
                    &mut attribute,
                    "Value",
                    "MessageAttributes.idemq-job-id.Value",
                )?)
            }
            Some(other) => {
                return Err(EnvelopeError::WrongType {
                    envelope: E,
                    field: "MessageAttributes.idemq-job-id",
                    found: kind(&other),
                    expected: "object",
                });
            }
        },
        Some(other) => {
            return Err(EnvelopeError::WrongType {
                envelope: E,
                field: "MessageAttributes",
                found: kind(&other),
                expected: "object",
            });
        }
    };
    Ok(Opened {
        payload: Cow::Owned(message),
        job_id_attribute,
        envelope_id: Some(message_id),
    })
}

/// An EventBridge event as a rule's SQS target receives it: the whole
/// event, `id` (a UUID per event) and `detail` (the JSON object the
/// producer put) among its top-level fields
/// (<https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-events-structure.html>).
fn open_eventbridge(body: &str) -> Result<Opened<'static>, EnvelopeError> {
    const E: Envelope = Envelope::EventBridge;
    let mut doc = parse_object(E, body)?;
    let id = string_field(E, &mut doc, "id")?;
    let detail = match doc.remove("detail") {
        None | Some(Value::Null) => {
            return Err(EnvelopeError::Missing {
                envelope: E,
                field: "detail",
            });
        }
        Some(detail) => detail,
    };
    // From the text, not from `detail`: serde_json (without its crate-wide
    // `arbitrary_precision`) holds a number beyond i64/u64 as an f64, and
    // the handler would decode, and the hash cover, a rounded value.
    let payload = exact::canonical_detail(body).unwrap_or_else(|| canonical_json(&detail));
    Ok(Opened {
        payload: Cow::Owned(payload),
        job_id_attribute: None,
        envelope_id: Some(id),
    })
}

/// `value` as compact JSON with every object's keys in byte order.
///
/// An EventBridge `detail` is JSON that EventBridge parsed from the
/// producer's `Detail` string and wrote back into the event: its spacing
/// and key order are EventBridge's (or an emulator's), not the producer's.
/// The payload hash covers this canonical form, so the same detail always
/// hashes the same, however it was laid out. (serde_json keeps insertion
/// order in this build, `preserve_order` being on, so the keys are sorted
/// here rather than trusted to a `BTreeMap`.)
pub fn canonical_json(value: &Value) -> String {
    fn write(v: &Value, out: &mut String) {
        match v {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                out.push('{');
                for (i, (k, v)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    write(v, out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// [`canonical_json`] over JSON text, keeping numbers exact.
mod exact {
    use serde_json::Value;

    /// A JSON value as scanned, its scalars still as written.
    enum Raw<'a> {
        Object(Vec<(String, Raw<'a>)>),
        Array(Vec<Raw<'a>>),
        Scalar(&'a str),
    }

    /// The top-level `detail` of the event `body` (valid JSON, already
    /// parsed once by serde_json) in the form [`super::canonical_json`]
    /// gives, except that a number an f64 cannot hold exactly (beyond
    /// i64/u64, or with more significant digits than an f64 keeps) is
    /// written as the event wrote it: two details that differ only there
    /// hash differently, and the handler decodes the exact digits. Every
    /// other number renders as before, so the payload hashes of existing
    /// markers still match. `None` if the text does not scan.
    pub(super) fn canonical_detail(body: &str) -> Option<String> {
        let mut scan = Scan { text: body, at: 0 };
        let Raw::Object(fields) = scan.value()? else {
            return None;
        };
        // serde_json keeps the last of repeated keys: so does this.
        let detail = fields.into_iter().rev().find(|(k, _)| k == "detail")?.1;
        let mut out = String::new();
        write(detail, &mut out)?;
        Some(out)
    }

    fn write(raw: Raw<'_>, out: &mut String) -> Option<()> {
        match raw {
            Raw::Object(mut fields) => {
                // Stable: of repeated keys, the last one stays (as in
                // serde_json's map).
                fields.sort_by(|a, b| a.0.cmp(&b.0));
                let mut kept: Vec<(String, Raw<'_>)> = Vec::with_capacity(fields.len());
                for (k, v) in fields {
                    match kept.last_mut() {
                        Some(last) if last.0 == k => last.1 = v,
                        _ => kept.push((k, v)),
                    }
                }
                out.push('{');
                for (i, (k, v)) in kept.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k).to_string());
                    out.push(':');
                    write(v, out)?;
                }
                out.push('}');
            }
            Raw::Array(items) => {
                out.push('[');
                for (i, item) in items.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out)?;
                }
                out.push(']');
            }
            Raw::Scalar(token) => out.push_str(&scalar(token)?),
        }
        Some(())
    }

    fn scalar(token: &str) -> Option<String> {
        let value: Value = match serde_json::from_str(token) {
            Ok(value) => value,
            // Out of f64's range ("1e400"): only the text holds it.
            Err(_) if is_number(token) => return Some(token.to_owned()),
            Err(_) => return None,
        };
        Some(match &value {
            Value::Number(n) if n.is_f64() => {
                let rendered = n.to_string();
                if same_decimal(token, &rendered) {
                    rendered
                } else {
                    token.to_owned()
                }
            }
            _ => value.to_string(),
        })
    }

    fn is_number(token: &str) -> bool {
        token
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E'))
    }

    /// Whether two JSON numbers denote the same decimal value (so the
    /// shortest f64 rendering lost nothing of what was written).
    fn same_decimal(a: &str, b: &str) -> bool {
        decimal(a).is_some_and(|a| decimal(b).is_some_and(|b| a == b))
    }

    /// `(negative, significant digits, exponent)`: the value is the digits
    /// times 10^exponent; zero is `(false, "", 0)`.
    fn decimal(number: &str) -> Option<(bool, String, i64)> {
        let (negative, rest) = match number.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, number),
        };
        let (mantissa, exponent) = match rest.find(['e', 'E']) {
            Some(i) => (&rest[..i], rest[i + 1..].parse::<i64>().ok()?),
            None => (rest, 0),
        };
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let digits = format!("{int}{frac}");
        let mut exponent = exponent.checked_sub(i64::try_from(frac.len()).ok()?)?;
        let digits = digits.trim_start_matches('0');
        let trimmed = digits.trim_end_matches('0');
        exponent = exponent.checked_add(i64::try_from(digits.len() - trimmed.len()).ok()?)?;
        if trimmed.is_empty() {
            return Some((false, String::new(), 0));
        }
        Some((negative, trimmed.to_owned(), exponent))
    }

    struct Scan<'a> {
        text: &'a str,
        at: usize,
    }

    impl<'a> Scan<'a> {
        fn skip_space(&mut self) {
            let rest = &self.text[self.at..];
            self.at += rest.len() - rest.trim_start_matches([' ', '\t', '\n', '\r']).len();
        }

        fn peek(&self) -> Option<u8> {
            self.text.as_bytes().get(self.at).copied()
        }

        fn eat(&mut self, byte: u8) -> bool {
            self.skip_space();
            let found = self.peek() == Some(byte);
            if found {
                self.at += 1;
            }
            found
        }

        fn value(&mut self) -> Option<Raw<'a>> {
            self.skip_space();
            match self.peek()? {
                b'{' => {
                    self.at += 1;
                    let mut fields = Vec::new();
                    if self.eat(b'}') {
                        return Some(Raw::Object(fields));
                    }
                    loop {
                        self.skip_space();
                        let key = serde_json::from_str::<String>(self.string()?).ok()?;
                        if !self.eat(b':') {
                            return None;
                        }
                        fields.push((key, self.value()?));
                        if self.eat(b'}') {
                            return Some(Raw::Object(fields));
                        }
                        if !self.eat(b',') {
                            return None;
                        }
                    }
                }
                b'[' => {
                    self.at += 1;
                    let mut items = Vec::new();
                    if self.eat(b']') {
                        return Some(Raw::Array(items));
                    }
                    loop {
                        items.push(self.value()?);
                        if self.eat(b']') {
                            return Some(Raw::Array(items));
                        }
                        if !self.eat(b',') {
                            return None;
                        }
                    }
                }
                b'"' => self.string().map(Raw::Scalar),
                _ => {
                    // A number, `true`, `false` or `null`.
                    let start = self.at;
                    let rest = &self.text[start..];
                    let len = rest
                        .find(|c: char| !(c.is_ascii_alphanumeric() || "+-.".contains(c)))
                        .unwrap_or(rest.len());
                    self.at += len;
                    (len > 0).then(|| Raw::Scalar(&self.text[start..self.at]))
                }
            }
        }

        /// A string token, quotes and escapes included. `"` and `\` are
        /// ASCII, never part of a multi-byte UTF-8 character.
        fn string(&mut self) -> Option<&'a str> {
            let bytes = self.text.as_bytes();
            if bytes.get(self.at) != Some(&b'"') {
                return None;
            }
            let start = self.at;
            let mut i = start + 1;
            loop {
                match bytes.get(i)? {
                    b'\\' => i += 2,
                    b'"' => break,
                    _ => i += 1,
                }
            }
            self.at = i + 1;
            Some(&self.text[start..self.at])
        }
    }
}

/// Set once this process has warned that it identifies a job by its
/// envelope's id.
static ENVELOPE_ID_IDENTITY_WARNED: AtomicBool = AtomicBool::new(false);

/// Logs, once per process, that a job was identified by its SNS `MessageId`
/// or EventBridge event `id`, and what that costs. True the one time it
/// logs. That id survives SQS redeliveries and redrives (it is in the body)
/// and SNS's and EventBridge's own delivery retries, but a producer's retry
/// of the publish is a new notification or event with a new id: a new job,
/// applied again.
pub fn warn_envelope_id_identity(envelope: Envelope) -> bool {
    if ENVELOPE_ID_IDENTITY_WARNED.swap(true, Ordering::Relaxed) {
        return false;
    }
    let (id, fix) = match envelope {
        Envelope::EventBridge => (
            "EventBridge event id",
            "set IDEMQ_JOB_ID_POINTER to the id in `detail`",
        ),
        _ => (
            "SNS MessageId",
            "publish with the idemq-job-id message attribute (idemq::TopicProducer and `idemq send --topic-arn` do) or set IDEMQ_JOB_ID_POINTER",
        ),
    };
    tracing::warn!(
        "a job has no {JOB_ID_ATTRIBUTE} and no id in its inner message, so idemq identifies it by \
         its {id}. That id survives SQS redeliveries and redrives, but a producer's retry of the \
         publish gets a new one: a new job, applied again. To make retries duplicates, {fix}. \
         (Logged once per process.)"
    );
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{InvalidJobId, JobIdResolver, JobIdSource};

    /// What SNS delivered to an SQS queue (raw message delivery off) on
    /// LocalStack 2026.3, the shape of the AWS example
    /// (<https://docs.aws.amazon.com/sns/latest/dg/sns-large-payload-raw-message-delivery.html>).
    const SNS: &str = include_str!("../tests/fixtures/sns_notification.json");
    /// What an EventBridge rule's SQS target received on LocalStack 2026.3.
    const EVENT: &str = include_str!("../tests/fixtures/eventbridge_event.json");

    fn sns(message_id: &str, attributes: &str) -> String {
        format!(
            r#"{{"Type":"Notification","MessageId":"{message_id}","TopicArn":"arn:aws:sns:us-east-1:000000000000:t",
            "Message":"{{\"transfer_id\":\"t-1\",\"amount\":5}}","Timestamp":"2026-12-03T09:35:05.087Z",
            "SignatureVersion":"1","Signature":"c2ln","MessageAttributes":{attributes}}}"#
        )
    }

    #[test]
    fn the_fixtures_open() {
        let job = Envelope::Sns.open(SNS).unwrap();
        assert_eq!(job.payload, r#"{"transfer_id": "t1", "amount": 5}"#);
        assert_eq!(job.job_id_attribute.as_deref(), Some("job-1"));
        assert_eq!(
            job.envelope_id.as_deref(),
            Some("d18f9247-33ad-4020-8ba1-c4ca357fcab7")
        );
        let job = Envelope::EventBridge.open(EVENT).unwrap();
        // Canonical: keys sorted at every level, compact.
        assert_eq!(
            job.payload,
            r#"{"amount":7,"b":{"a":2,"z":1},"transfer_id":"t2"}"#
        );
        assert_eq!(job.job_id_attribute, None);
        assert_eq!(
            job.envelope_id.as_deref(),
            Some("b45d6150-fa71-4016-9b34-c51e24549650")
        );
        // No envelope: the body itself, borrowed.
        let job = Envelope::None.open(SNS).unwrap();
        assert!(matches!(job.payload, Cow::Borrowed(b) if b == SNS));
    }

    #[test]
    fn sns_attribute_then_pointer_then_message_id() {
        let with_attr = sns(
            "m-1",
            r#"{"idemq-job-id":{"Type":"String","Value":"job-9"},"x":{"Type":"Binary","Value":"AAE="}}"#,
        );
        let plain = JobIdResolver::new().with_envelope(Envelope::Sns);
        let pointer = plain.clone().with_body_pointer("/transfer_id");
        let job = pointer.resolve_job(None, &with_attr, "sqs-1").unwrap();
        assert_eq!(
            (job.id.as_str(), job.source),
            ("job-9", JobIdSource::Attribute)
        );
        assert_eq!(job.payload, r#"{"transfer_id":"t-1","amount":5}"#);

        // The SQS message's own attribute (idemq's redrive stamp) wins.
        let job = pointer
            .resolve_job(Some("stamped"), &with_attr, "sqs-1")
            .unwrap();
        assert_eq!(
            (job.id.as_str(), job.source),
            ("stamped", JobIdSource::Attribute)
        );

        let without = sns("m-2", r#"{"other":{"Type":"String","Value":"v"}}"#);
        let job = pointer.resolve_job(None, &without, "sqs-1").unwrap();
        assert_eq!(
            (job.id.as_str(), job.source),
            ("t-1", JobIdSource::BodyPointer)
        );
        let job = plain.resolve_job(None, &without, "sqs-1").unwrap();
        assert_eq!(
            (job.id.as_str(), job.source),
            ("m-2", JobIdSource::EnvelopeId)
        );
        // No MessageAttributes at all, or a pointer to nothing: MessageId.
        let bare = r#"{"Type":"Notification","MessageId":"m-3","Message":"{}"}"#;
        let job = pointer.resolve_job(None, bare, "sqs-1").unwrap();
        assert_eq!(
            (job.id.as_str(), job.source),
            ("m-3", JobIdSource::EnvelopeId)
        );
        // A Number attribute is an id too.
        let number = sns("m-4", r#"{"idemq-job-id":{"Type":"Number","Value":"42"}}"#);
        assert_eq!(
            plain.resolve_job(None, &number, "s").unwrap().id.as_str(),
            "42"
        );
    }

    #[test]
    fn republishing_the_same_job_gives_the_same_id_and_payload() {
        let r = JobIdResolver::new().with_envelope(Envelope::Sns);
        let attr = r#"{"idemq-job-id":{"Type":"String","Value":"job-1"}}"#;
        let a = sns("m-1", attr);
        let b = sns("m-2", attr)
            .replace("c2ln", "b3RoZXI=")
            .replace("05.087Z", "09.001Z");
        let (a, b) = (
            r.resolve_job(None, &a, "sqs-a").unwrap(),
            r.resolve_job(None, &b, "sqs-b").unwrap(),
        );
        assert_eq!(a, b);
        assert_eq!(
            crate::PayloadHash::of(a.payload.as_bytes()),
            crate::PayloadHash::of(b.payload.as_bytes())
        );
    }

    #[test]
    fn eventbridge_pointer_applies_to_detail_then_the_event_id() {
        let r = JobIdResolver::new()
            .with_envelope(Envelope::EventBridge)
            .with_body_pointer("/transfer_id");
        let job = r.resolve_job(None, EVENT, "sqs-1").unwrap();
        assert_eq!(
            (job.id.as_str(), job.source),
            ("t2", JobIdSource::BodyPointer)
        );
        let job = JobIdResolver::new()
            .with_envelope(Envelope::EventBridge)
            .resolve_job(None, EVENT, "sqs-1")
            .unwrap();
        assert_eq!(
            (job.id.as_str(), job.source),
            (
                "b45d6150-fa71-4016-9b34-c51e24549650",
                JobIdSource::EnvelopeId
            )
        );
        // The same detail laid out differently is the same payload.
        let other = r#"{"id":"e-2","time":"2027-01-01T00:00:00Z","detail":{ "transfer_id" : "t2",
            "b" : { "z" : 1, "a" : 2 }, "amount" : 7 }}"#;
        assert_eq!(
            r.resolve_job(None, other, "sqs-2").unwrap().payload,
            job.payload
        );
        // A pointer to a non-scalar in detail is refused, as for plain bodies.
        let r = r.with_body_pointer("/b");
        assert!(matches!(
            r.resolve_job(None, EVENT, "s"),
            Err(InvalidJobId::NotAScalar {
                found: "object",
                ..
            })
        ));
    }

    fn open_err(envelope: Envelope, body: &str) -> EnvelopeError {
        envelope.open(body).unwrap_err()
    }

    #[test]
    fn malformed_envelopes_are_refused_without_their_values() {
        let secret = "s3cr3t-card-4111";
        let cases: Vec<(Envelope, String, EnvelopeError)> = vec![
            (
                Envelope::Sns,
                format!("{{\"Type\":\"Notification\",\"Message\":\"{secret}"),
                EnvelopeError::NotJson {
                    envelope: Envelope::Sns,
                    detail: "unexpected end of input at line 1 column 50".into(),
                },
            ),
            (
                Envelope::Sns,
                format!("[\"{secret}\"]"),
                EnvelopeError::NotAnObject {
                    envelope: Envelope::Sns,
                    found: "array",
                },
            ),
            (
                // Raw message delivery on: the body is the job itself.
                Envelope::Sns,
                format!("{{\"transfer_id\":\"{secret}\"}}"),
                EnvelopeError::Missing {
                    envelope: Envelope::Sns,
                    field: "Type",
                },
            ),
            (
                Envelope::Sns,
                format!("{{\"Type\":\"{secret}\",\"MessageId\":\"m\",\"Message\":\"x\"}}"),
                EnvelopeError::NotANotification {
                    found: "an unknown type",
                },
            ),
            (
                Envelope::Sns,
                r#"{"Type":"SubscriptionConfirmation","MessageId":"m","Message":"x"}"#.into(),
                EnvelopeError::NotANotification {
                    found: "SubscriptionConfirmation",
                },
            ),
            (
                Envelope::Sns,
                format!("{{\"Type\":\"Notification\",\"Message\":\"{secret}\"}}"),
                EnvelopeError::Missing {
                    envelope: Envelope::Sns,
                    field: "MessageId",
                },
            ),
            (
                Envelope::Sns,
                r#"{"Type":"Notification","MessageId":"m"}"#.into(),
                EnvelopeError::Missing {
                    envelope: Envelope::Sns,
                    field: "Message",
                },
            ),
            (
                Envelope::Sns,
                format!("{{\"Type\":\"Notification\",\"MessageId\":\"m\",\"Message\":{{\"k\":\"{secret}\"}}}}"),
                EnvelopeError::WrongType {
                    envelope: Envelope::Sns,
                    field: "Message",
                    found: "object",
                    expected: "string",
                },
            ),
            (
                Envelope::Sns,
                format!(
                    "{{\"Type\":\"Notification\",\"MessageId\":\"m\",\"Message\":\"x\",\"MessageAttributes\":{{\"idemq-job-id\":{{\"Type\":\"Binary\",\"Value\":\"{secret}\"}}}}}}"
                ),
                EnvelopeError::JobIdAttributeType { found: "Binary" },
            ),
            (
                Envelope::Sns,
                r#"{"Type":"Notification","MessageId":"m","Message":"x","MessageAttributes":{"idemq-job-id":{"Type":"String"}}}"#.into(),
                EnvelopeError::Missing {
                    envelope: Envelope::Sns,
                    field: "MessageAttributes.idemq-job-id.Value",
                },
            ),
            (
                Envelope::Sns,
                r#"{"Type":"Notification","MessageId":"m","Message":"x","MessageAttributes":["a"]}"#.into(),
                EnvelopeError::WrongType {
                    envelope: Envelope::Sns,
                    field: "MessageAttributes",
                    found: "array",
                    expected: "object",
                },
            ),
            (
                Envelope::EventBridge,
                format!("{{\"detail\":{{\"k\":\"{secret}\"}}}}"),
                EnvelopeError::Missing {
                    envelope: Envelope::EventBridge,
                    field: "id",
                },
            ),
            (
                Envelope::EventBridge,
                r#"{"id":"e-1","detail":null}"#.into(),
                EnvelopeError::Missing {
                    envelope: Envelope::EventBridge,
                    field: "detail",
                },
            ),
            (
                Envelope::EventBridge,
                format!("{{\"id\":7,\"detail\":\"{secret}\"}}"),
                EnvelopeError::WrongType {
                    envelope: Envelope::EventBridge,
                    field: "id",
                    found: "number",
                    expected: "string",
                },
            ),
            (
                Envelope::EventBridge,
                secret.to_string(),
                EnvelopeError::NotJson {
                    envelope: Envelope::EventBridge,
                    detail: "syntax error at line 1 column 1".into(),
                },
            ),
        ];
        for (envelope, body, want) in cases {
            let got = open_err(envelope, &body);
            assert_eq!(got, want, "{body}");
            let text = got.to_string();
            assert!(!text.contains(secret), "payload bytes in {text:?}");
            // Through the resolver: a permanent InvalidJobId with the same text.
            let err = JobIdResolver::new()
                .with_envelope(envelope)
                .resolve_job(Some("attr-wins-only-after-parsing"), &body, "m")
                .unwrap_err();
            assert_eq!(err, InvalidJobId::Envelope(want));
            assert_eq!(err.to_string(), text);
        }
        let text = open_err(Envelope::Sns, r#"{"transfer_id":1}"#).to_string();
        assert!(text.contains("raw message delivery"), "{text}");
        let text = open_err(
            Envelope::Sns,
            r#"{"Type":"SubscriptionConfirmation","MessageId":"m","Message":"x"}"#,
        )
        .to_string();
        assert!(text.contains("SubscribeURL"), "{text}");
    }

    #[test]
    fn envelope_id_identity_is_warned_once_per_process() {
        // Whatever warned before in this process, never a second time.
        warn_envelope_id_identity(Envelope::Sns);
        assert!(!warn_envelope_id_identity(Envelope::EventBridge));
        assert!(!warn_envelope_id_identity(Envelope::Sns));
    }

    #[test]
    fn envelope_names_parse() {
        assert_eq!("sns".parse(), Ok(Envelope::Sns));
        assert_eq!("EventBridge".parse(), Ok(Envelope::EventBridge));
        assert_eq!("none".parse(), Ok(Envelope::None));
        assert_eq!("".parse(), Ok(Envelope::None));
        assert_eq!("sqs".parse::<Envelope>(), Err(UnknownEnvelope));
        for e in [Envelope::None, Envelope::Sns, Envelope::EventBridge] {
            assert_eq!(e.to_string().parse(), Ok(e));
        }
    }

    #[test]
    fn canonical_json_sorts_keys_and_keeps_values() {
        let v: Value =
            serde_json::from_str(r#"{"b":[{"y":1,"x":"é\n"}],"a":null,"c":1.5}"#).unwrap();
        assert_eq!(
            canonical_json(&v),
            r#"{"a":null,"b":[{"x":"é\n","y":1}],"c":1.5}"#
        );
        let back: Value = serde_json::from_str(&canonical_json(&v)).unwrap();
        assert_eq!(back, v);
    }
}
