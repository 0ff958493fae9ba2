//! The error a modelled service answers, in the AWS JSON 1.0 shape the SDK
//! parses (`{"__type": "…#Code", "message": "…", …}`).

use serde_json::{Map, Value};

/// An error answer of the in-memory DynamoDB or SQS: what the real service
/// would answer (a `ConditionalCheckFailedException`, a
/// `TransactionCanceledException` with its reasons, a `QueueDoesNotExist`),
/// or a `ValidationException` naming a request or expression the kit does
/// not model. The SDK client sees it as the service error it names.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceError {
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
        Self {
            status: 400,
            kind: format!("{DYNAMODB}{code}"),
            message: message.into(),
            extra: Map::new(),
        }
    }

    /// DynamoDB's `ValidationException`: a request it (or the kit) refuses.
    pub(crate) fn validation(message: impl Into<String>) -> Self {
        Self::dynamodb("ValidationException", message)
    }

    pub(crate) fn sqs(code: &str, message: impl Into<String>) -> Self {
        Self {
            status: 400,
            kind: format!("{SQS}{code}"),
            message: message.into(),
            extra: Map::new(),
        }
    }

    pub(crate) fn with(mut self, field: &str, value: Value) -> Self {
        self.extra.insert(field.to_owned(), value);
        self
    }

    /// The error code (`ValidationException`, `QueueDoesNotExist`, …).
    pub fn code(&self) -> &str {
        self.kind.rsplit('#').next().unwrap_or(&self.kind)
    }

    /// The error's message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The HTTP status of the answer.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// A field of the error body beyond code and message
    /// (`CancellationReasons`, `Item`).
    pub fn field(&self, name: &str) -> Option<&Value> {
        self.extra.get(name)
    }

    /// The error body as the service sends it.
    pub fn to_body(&self) -> Value {
        let mut body = Map::new();
        body.insert("__type".into(), Value::String(self.kind.clone()));
        body.insert("message".into(), Value::String(self.message.clone()));
        body.insert("Message".into(), Value::String(self.message.clone()));
        for (k, v) in &self.extra {
            body.insert(k.clone(), v.clone());
        }
        Value::Object(body)
    }
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code(), self.message)
    }
}

impl std::error::Error for ServiceError {}
