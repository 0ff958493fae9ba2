//! The error a modelled service answers, in the AWS JSON 1.0 shape the SDK
//! parses (`{"__type": "…#Code", "message": "…", …}`).

use serde_json::{Map, Value};

/// An error answer of the in-memory DynamoDB or SQS: what the real service
/// would answer (a `ConditionalCheckFailedException`, a
/// `TransactionCanceledException` with its reasons, a `QueueDoesNotExist`),
/// or a `ValidationException` naming a request or expression the kit does
/// not model. The SDK client sees it as the service error it names.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceError(Box<Inner>);

/// Boxed: errors are rare, and a small `Result` keeps every call cheap.
#[derive(Debug, Clone, PartialEq)]
struct Inner {
    status: u16,
    kind: String,
    message: String,
    extra: Map<String, Value>,
}

/// DynamoDB's error type prefix (AWS JSON 1.0 `__type`).
const DYNAMODB: &str = "com.amazonaws.dynamodb.v20120810#";
/// SQS's error type prefix.
const SQS: &str = "com.amazonaws.sqs#";

impl ServiceError {
    pub(crate) fn dynamodb(code: &str, message: impl Into<String>) -> Self {
        Self(Box::new(Inner {
            status: 400,
            kind: format!("{DYNAMODB}{code}"),
            message: message.into(),
            extra: Map::new(),
        }))
    }

    /// DynamoDB's `ValidationException`: a request it (or the kit) refuses.
    pub(crate) fn validation(message: impl Into<String>) -> Self {
        Self::dynamodb("ValidationException", message)
    }

    pub(crate) fn sqs(code: &str, message: impl Into<String>) -> Self {
        Self(Box::new(Inner {
            status: 400,
            kind: format!("{SQS}{code}"),
            message: message.into(),
            extra: Map::new(),
        }))
    }

    pub(crate) fn with(mut self, field: &str, value: Value) -> Self {
        self.0.extra.insert(field.to_owned(), value);
        self
    }

    /// The error code (`ValidationException`, `QueueDoesNotExist`, …).
    pub fn code(&self) -> &str {
        self.0.kind.rsplit('#').next().unwrap_or(&self.0.kind)
    }

    /// The error's message.
    pub fn message(&self) -> &str {
        &self.0.message
    }

    /// The HTTP status of the answer.
    pub fn status(&self) -> u16 {
        self.0.status
    }

    /// A field of the error body beyond code and message
    /// (`CancellationReasons`, `Item`).
    pub fn field(&self, name: &str) -> Option<&Value> {
        self.0.extra.get(name)
    }

    /// The error body as the service sends it.
    pub fn to_body(&self) -> Value {
        let mut body = Map::new();
        body.insert("__type".into(), Value::String(self.0.kind.clone()));
        body.insert("message".into(), Value::String(self.0.message.clone()));
        body.insert("Message".into(), Value::String(self.0.message.clone()));
        for (k, v) in &self.0.extra {
            body.insert(k.clone(), v.clone());
        }
        Value::Object(body)
    }
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code(), self.0.message)
    }
}

impl std::error::Error for ServiceError {}
