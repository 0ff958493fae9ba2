//! The network between the SDK clients and the in-memory services: an
//! `HttpConnector`, the SDK's own extension point for HTTP, that reads the
//! operation from `X-Amz-Target` (DynamoDB and SQS both speak AWS JSON 1.0)
//! and answers from [`MemoryDynamoDb`] or [`MemorySqs`]. Everything above
//! it (request signing, serialization, error parsing) is the real SDK.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use aws_smithy_runtime_api::client::http::{
    HttpConnector, HttpConnectorFuture, SharedHttpClient, SharedHttpConnector, http_client_fn,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use serde_json::Value;

use super::dynamodb::MemoryDynamoDb;
use super::error::ServiceError;
use super::sqs::MemorySqs;

/// Both services, shared by the connector and the test.
#[derive(Debug, Clone, Default)]
pub(crate) struct Services {
    pub(crate) dynamodb: Arc<Mutex<MemoryDynamoDb>>,
    pub(crate) sqs: Arc<Mutex<MemorySqs>>,
}

/// A lock that a panicking test thread left poisoned still holds
/// consistent data (every request is applied whole under it).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Services {
    fn answer(&self, target: &str, body: &[u8]) -> Result<Value, ServiceError> {
        let (service, op) = target.split_once('.').unwrap_or((target, ""));
        let request: Value = serde_json::from_slice(body).map_err(|_| {
            if service.starts_with("DynamoDB") {
                ServiceError::dynamodb("SerializationException", "the request body is not JSON")
            } else {
                ServiceError::sqs("InvalidParameterValue", "the request body is not JSON")
            }
        })?;
        if service.starts_with("DynamoDB") {
            lock(&self.dynamodb).apply(op, &request)
        } else if service == "AmazonSQS" {
            lock(&self.sqs).apply(op, &request)
        } else {
            Err(ServiceError::validation(format!(
                "idemq::testing serves DynamoDB and SQS only, not {target:?}"
            )))
        }
    }

    /// An HTTP client for an SDK config: every request is answered here.
    pub(crate) fn http_client(&self) -> SharedHttpClient {
        let services = self.clone();
        http_client_fn(move |_, _| SharedHttpConnector::new(Connector(services.clone())))
    }
}

#[derive(Debug)]
struct Connector(Services);

fn response(status: u16, body: &Value) -> Result<HttpResponse, ConnectorError> {
    let status =
        StatusCode::try_from(status).map_err(|e| ConnectorError::other(Box::new(e), None))?;
    let mut r = HttpResponse::new(status, SdkBody::from(body.to_string()));
    r.headers_mut()
        .insert("content-type", "application/x-amz-json-1.0");
    Ok(r)
}

impl HttpConnector for Connector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let target = request
            .headers()
            .get("x-amz-target")
            .unwrap_or_default()
            .to_owned();
        let body = request.body().bytes().unwrap_or_default();
        let answer = self.0.answer(&target, body);
        HttpConnectorFuture::ready(match answer {
            Ok(v) => response(200, &v),
            Err(e) => response(e.status(), &e.to_body()),
        })
    }
}
