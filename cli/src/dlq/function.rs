//! `--function NAME_OR_ARN`: a deployed consumer's settings, read from its
//! Lambda function instead of copied into flags.
//!
//! Its environment comes from `GetFunctionConfiguration`
//! (<https://docs.aws.amazon.com/lambda/latest/api/API_GetFunctionConfiguration.html>:
//! `Environment.Variables`, or `Environment.Error` when Lambda could not
//! decrypt them,
//! <https://docs.aws.amazon.com/lambda/latest/api/API_EnvironmentResponse.html>).
//! Its DLQ is found through its SQS event source:
//! `ListEventSourceMappings` with `FunctionName`
//! (<https://docs.aws.amazon.com/lambda/latest/dg/API_ListEventSourceMappings.html>,
//! paginated with `Marker`; an alias's mappings are listed under the
//! alias-qualified name), then the source queue's `RedrivePolicy`, whose
//! `deadLetterTargetArn` names the DLQ
//! (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_GetQueueAttributes.html>,
//! <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-dead-letter-queues.html>:
//! a DLQ is in the source queue's account and region), then `GetQueueUrl`.
//!
//! Lambda's and SQS's errors are mapped here, once: a missing function,
//! no or several SQS sources, a source without a redrive policy, and a
//! denied call (named with the IAM action it needs) each say so.

use std::collections::BTreeMap;
use std::fmt;

use aws_sdk_lambda::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_sqs::types::QueueAttributeName;

/// A function's configuration, as far as `idemq dlq` reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// Its ARN, as Lambda answered it (qualified when the name was).
    pub arn: String,
    /// Its whole environment (`ConsumerEnv` keeps only idemq's variables).
    pub vars: BTreeMap<String, String>,
}

/// The queue a function reads and the DLQ its redrive policy names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The source queue's ARN (the event source mapping's).
    pub source_arn: String,
    /// The source queue's URL.
    pub source_url: String,
    /// The DLQ's ARN (`deadLetterTargetArn`), when asked for.
    pub dlq_arn: Option<String>,
    /// The DLQ's URL, when asked for.
    pub dlq_url: Option<String>,
}

/// Why a function's settings could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FunctionError {
    /// Lambda has no function of this name in the region asked.
    NotFound {
        function: String,
        region: Option<String>,
    },
    /// A call was refused: the caller's policy lacks `action` on `resource`.
    Denied {
        action: &'static str,
        resource: String,
    },
    /// Lambda could not return the environment (a KMS key the caller may
    /// not use, say).
    Environment {
        function: String,
        code: String,
        message: String,
    },
    /// No event source mapping of the function reads an SQS queue.
    NoSqsSource { function: String },
    /// More than one does: which DLQ is meant cannot be guessed.
    SeveralSqsSources {
        function: String,
        queues: Vec<String>,
    },
    /// The source queue has no `RedrivePolicy`: it has no DLQ.
    NoRedrivePolicy { queue: String },
    /// A queue an ARN names does not exist.
    NoSuchQueue { queue: String },
    /// Any other failure (throttling, an outage), with its context.
    Aws {
        action: &'static str,
        resource: String,
        error: String,
    },
}

impl FunctionError {
    /// Whether the operator's input is at fault (exit 2), rather than AWS
    /// or the caller's permissions (exit 1).
    pub fn is_usage(&self) -> bool {
        !matches!(
            self,
            Self::Denied { .. } | Self::Environment { .. } | Self::Aws { .. }
        )
    }
}

impl fmt::Display for FunctionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotFound { function, region } => write!(
                f,
                "Lambda function {function} not found{}: check the name (or ARN) and the region \
                 (AWS_REGION, AWS_PROFILE)",
                region
                    .as_deref()
                    .map(|r| format!(" in {r}"))
                    .unwrap_or_default()
            ),
            Self::Denied { action, resource } => write!(
                f,
                "access denied: {action} on {resource} is not allowed to these credentials; \
                 grant it in the operator's IAM policy, or pass the settings as flags instead \
                 of --function"
            ),
            Self::Environment {
                function,
                code,
                message,
            } => write!(
                f,
                "Lambda could not return the environment of {function}: {code}: {message} \
                 (an environment encrypted with a customer managed KMS key needs kms:Decrypt \
                 on that key)"
            ),
            Self::NoSqsSource { function } => write!(
                f,
                "{function} has no SQS event source mapping: pass --dlq-url (for a qualified \
                 function, name the alias the mapping is on: NAME:ALIAS)"
            ),
            Self::SeveralSqsSources { function, queues } => write!(
                f,
                "{function} reads {} SQS queues ({}): pass --dlq-url with the DLQ of the one meant",
                queues.len(),
                queues.join(", ")
            ),
            Self::NoRedrivePolicy { queue } => write!(
                f,
                "source queue {queue} has no RedrivePolicy, so it has no DLQ: pass --dlq-url"
            ),
            Self::NoSuchQueue { queue } => write!(f, "queue {queue} does not exist"),
            Self::Aws {
                action,
                resource,
                error,
            } => write!(f, "{action} on {resource}: {error}"),
        }
    }
}

impl std::error::Error for FunctionError {}

/// Whether an error code is a denial, in any of the forms AWS services
/// give it (`AccessDeniedException`, `AccessDenied`, with or without a
/// `namespace#` before it or a `:suffix` after).
fn is_denied(code: Option<&str>) -> bool {
    let Some(code) = code else { return false };
    let code = code.rsplit('#').next().unwrap_or(code);
    let code = code.split(':').next().unwrap_or(code);
    matches!(code, "AccessDeniedException" | "AccessDenied")
}

/// `GetFunctionConfiguration` of `function` (a name, `NAME:ALIAS`, or an
/// ARN).
pub async fn read_function(
    lambda: &aws_sdk_lambda::Client,
    function: &str,
) -> Result<Function, FunctionError> {
    const ACTION: &str = "lambda:GetFunctionConfiguration";
    let out = lambda
        .get_function_configuration()
        .function_name(function)
        .send()
        .await
        .map_err(|e| {
            lambda_error(
                e,
                |se| se.is_resource_not_found_exception(),
                lambda,
                ACTION,
                function,
            )
        })?;
    let arn = out.function_arn().unwrap_or(function).to_owned();
    if let Some(err) = out.environment().and_then(|e| e.error()) {
        return Err(FunctionError::Environment {
            function: arn,
            code: err.error_code().unwrap_or("error").to_owned(),
            message: err.message().unwrap_or_default().to_owned(),
        });
    }
    let vars = out
        .environment()
        .and_then(|e| e.variables())
        .map(|v| v.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    Ok(Function { arn, vars })
}

/// The SQS queues (ARNs) the function's event source mappings read,
/// each once, in Lambda's order.
pub async fn sqs_sources(
    lambda: &aws_sdk_lambda::Client,
    function: &str,
) -> Result<Vec<String>, FunctionError> {
    const ACTION: &str = "lambda:ListEventSourceMappings";
    let mut pages = lambda
        .list_event_source_mappings()
        .function_name(function)
        .into_paginator()
        .items()
        .send();
    let mut queues: Vec<String> = Vec::new();
    while let Some(mapping) = pages.next().await {
        let mapping = mapping.map_err(|e| {
            lambda_error(
                e,
                |se| se.is_resource_not_found_exception(),
                lambda,
                ACTION,
                function,
            )
        })?;
        if let Some(arn) = mapping.event_source_arn()
            && arn.split(':').nth(2) == Some("sqs")
            && !queues.iter().any(|q| q == arn)
        {
            queues.push(arn.to_owned());
        }
    }
    Ok(queues)
}

/// The function's one SQS source queue, and (`with_dlq`) the DLQ its
/// `RedrivePolicy` names.
pub async fn route(
    lambda: &aws_sdk_lambda::Client,
    sqs: &aws_sdk_sqs::Client,
    function: &str,
    with_dlq: bool,
) -> Result<Route, FunctionError> {
    let mut queues = sqs_sources(lambda, function).await?;
    let source_arn = match queues.len() {
        0 => {
            return Err(FunctionError::NoSqsSource {
                function: function.to_owned(),
            });
        }
        1 => queues.remove(0),
        _ => {
            return Err(FunctionError::SeveralSqsSources {
                function: function.to_owned(),
                queues,
            });
        }
    };
    let source_url = queue_url(sqs, &source_arn).await?;
    let mut route = Route {
        source_arn,
        source_url,
        dlq_arn: None,
        dlq_url: None,
    };
    if with_dlq {
        let dlq_arn = dead_letter_target(sqs, &route.source_url, &route.source_arn).await?;
        route.dlq_url = Some(queue_url(sqs, &dlq_arn).await?);
        route.dlq_arn = Some(dlq_arn);
    }
    Ok(route)
}

/// `RedrivePolicy.deadLetterTargetArn` of the queue at `url`.
async fn dead_letter_target(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    arn: &str,
) -> Result<String, FunctionError> {
    const ACTION: &str = "sqs:GetQueueAttributes";
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::RedrivePolicy)
        .send()
        .await
        .map_err(|e| sqs_error(e, ACTION, arn))?;
    out.attributes()
        .and_then(|a| a.get(&QueueAttributeName::RedrivePolicy))
        .and_then(|p| serde_json::from_str::<serde_json::Value>(p).ok())
        .and_then(|p| p["deadLetterTargetArn"].as_str().map(str::to_owned))
        .filter(|t| !t.is_empty())
        .ok_or_else(|| FunctionError::NoRedrivePolicy {
            queue: arn.to_owned(),
        })
}

/// The URL of the queue `arn` names (`arn:aws:sqs:region:account:name`),
/// by `GetQueueUrl` with its owner's account.
async fn queue_url(sqs: &aws_sdk_sqs::Client, arn: &str) -> Result<String, FunctionError> {
    const ACTION: &str = "sqs:GetQueueUrl";
    let parts: Vec<&str> = arn.split(':').collect();
    let (Some(account), Some(name)) = (parts.get(4), parts.get(5)) else {
        return Err(FunctionError::Aws {
            action: ACTION,
            resource: arn.to_owned(),
            error: "not an SQS queue ARN".into(),
        });
    };
    let out = sqs
        .get_queue_url()
        .queue_name(*name)
        .queue_owner_aws_account_id(*account)
        .send()
        .await
        .map_err(|e| sqs_error(e, ACTION, arn))?;
    Ok(out.queue_url().unwrap_or_default().to_owned())
}

/// A Lambda request's error as the operator reads it: the function not
/// found (`not_found` tells, per operation), access denied, or AWS's own.
fn lambda_error<E>(
    e: aws_sdk_lambda::error::SdkError<E, aws_sdk_lambda::config::http::HttpResponse>,
    not_found: fn(&E) -> bool,
    lambda: &aws_sdk_lambda::Client,
    action: &'static str,
    function: &str,
) -> FunctionError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let se = e.as_service_error();
    if se.is_some_and(not_found) {
        return FunctionError::NotFound {
            function: function.to_owned(),
            region: lambda.config().region().map(|r| r.to_string()),
        };
    }
    if is_denied(se.and_then(|se| se.code())) {
        return FunctionError::Denied {
            action,
            resource: function.to_owned(),
        };
    }
    FunctionError::Aws {
        action,
        resource: function.to_owned(),
        error: DisplayErrorContext(e).to_string(),
    }
}

fn sqs_error<E>(
    e: aws_sdk_sqs::error::SdkError<E, aws_sdk_sqs::config::http::HttpResponse>,
    action: &'static str,
    queue: &str,
) -> FunctionError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let code = e.as_service_error().and_then(|se| se.code());
    if code.is_some_and(|c| c.contains("NonExistentQueue") || c.contains("QueueDoesNotExist")) {
        return FunctionError::NoSuchQueue {
            queue: queue.to_owned(),
        };
    }
    if is_denied(code) {
        return FunctionError::Denied {
            action,
            resource: queue.to_owned(),
        };
    }
    FunctionError::Aws {
        action,
        resource: queue.to_owned(),
        error: DisplayErrorContext(e).to_string(),
    }
}

#[cfg(test)]
mod tests {
    //! Lambda and SQS answers the local emulators do not serve (they run
    //! no Lambda), with `aws-smithy-mocks` standing in for both.

    use aws_sdk_lambda::operation::get_function_configuration::{
        GetFunctionConfigurationError, GetFunctionConfigurationOutput,
    };
    use aws_sdk_lambda::operation::list_event_source_mappings::{
        ListEventSourceMappingsError, ListEventSourceMappingsOutput,
    };
    use aws_sdk_lambda::types::error::ResourceNotFoundException;
    use aws_sdk_lambda::types::{
        EnvironmentError, EnvironmentResponse, EventSourceMappingConfiguration,
    };
    use aws_sdk_sqs::operation::get_queue_attributes::{
        GetQueueAttributesError, GetQueueAttributesOutput,
    };
    use aws_sdk_sqs::operation::get_queue_url::{GetQueueUrlError, GetQueueUrlOutput};
    use aws_smithy_mocks::{
        MockResponseInterceptor, Rule, RuleMode, create_mock_http_client, mock,
    };

    use super::*;

    const FUNCTION: &str = "orders";
    const FUNCTION_ARN: &str = "arn:aws:lambda:us-east-1:111122223333:function:orders";
    const SOURCE_ARN: &str = "arn:aws:sqs:us-east-1:111122223333:orders";
    const SOURCE_URL: &str = "https://sqs.us-east-1.amazonaws.com/111122223333/orders";
    const DLQ_ARN: &str = "arn:aws:sqs:us-east-1:111122223333:orders-dlq";
    const DLQ_URL: &str = "https://sqs.us-east-1.amazonaws.com/111122223333/orders-dlq";

    fn interceptor(rules: &[&Rule]) -> MockResponseInterceptor {
        rules.iter().fold(
            MockResponseInterceptor::new().rule_mode(RuleMode::MatchAny),
            |i, r| i.with_rule(r),
        )
    }

    fn lambda(rules: &[&Rule]) -> aws_sdk_lambda::Client {
        use aws_sdk_lambda::config::{BehaviorVersion, Credentials, Region};
        let conf = aws_sdk_lambda::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "mock"))
            .retry_config(aws_sdk_lambda::config::retry::RetryConfig::disabled())
            .http_client(create_mock_http_client())
            .interceptor(interceptor(rules))
            .build();
        aws_sdk_lambda::Client::from_conf(conf)
    }

    fn sqs(rules: &[&Rule]) -> aws_sdk_sqs::Client {
        use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
        let conf = aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "mock"))
            .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled())
            .http_client(create_mock_http_client())
            .interceptor(interceptor(rules))
            .build();
        aws_sdk_sqs::Client::from_conf(conf)
    }

    fn mapping(arn: &str) -> EventSourceMappingConfiguration {
        EventSourceMappingConfiguration::builder()
            .event_source_arn(arn)
            .build()
    }

    fn denied<E>(make: fn(aws_sdk_lambda::error::ErrorMetadata) -> E) -> E {
        make(
            aws_sdk_lambda::error::ErrorMetadata::builder()
                .code("AccessDeniedException")
                .message("User is not authorized to perform this action")
                .build(),
        )
    }

    fn sqs_denied<E>(make: fn(aws_sdk_sqs::error::ErrorMetadata) -> E) -> E {
        make(
            aws_sdk_sqs::error::ErrorMetadata::builder()
                .code("AccessDenied")
                .message("not authorized")
                .build(),
        )
    }

    /// The source queue's URL, then the DLQ's, by their ARNs' names and
    /// account.
    fn get_queue_url() -> Rule {
        mock!(aws_sdk_sqs::Client::get_queue_url)
            .match_requests(|r| r.queue_owner_aws_account_id() == Some("111122223333"))
            .then_output(|| GetQueueUrlOutput::builder().queue_url(SOURCE_URL).build())
    }

    fn get_dlq_url() -> Rule {
        mock!(aws_sdk_sqs::Client::get_queue_url)
            .match_requests(|r| r.queue_name() == Some("orders-dlq"))
            .then_output(|| GetQueueUrlOutput::builder().queue_url(DLQ_URL).build())
    }

    fn redrive_policy(policy: Option<&'static str>) -> Rule {
        mock!(aws_sdk_sqs::Client::get_queue_attributes)
            .match_requests(|r| r.queue_url() == Some(SOURCE_URL))
            .then_output(move || {
                let mut out = GetQueueAttributesOutput::builder();
                if let Some(p) = policy {
                    out = out.attributes(QueueAttributeName::RedrivePolicy, p);
                }
                out.build()
            })
    }

    /// The whole environment and the ARN come back; a variable that is
    /// not idemq's is read too (ConsumerEnv drops it, tested there).
    #[tokio::test]
    async fn the_environment_and_arn_are_read() {
        let get = mock!(aws_sdk_lambda::Client::get_function_configuration)
            .match_requests(|r| r.function_name() == Some(FUNCTION))
            .then_output(|| {
                GetFunctionConfigurationOutput::builder()
                    .function_arn(FUNCTION_ARN)
                    .environment(
                        EnvironmentResponse::builder()
                            .variables("IDEMQ_TABLE", "jobs")
                            .variables("IDEMQ_NAMESPACE", "billing")
                            .build(),
                    )
                    .build()
            });
        let f = read_function(&lambda(&[&get]), FUNCTION).await.unwrap();
        assert_eq!(f.arn, FUNCTION_ARN);
        assert_eq!(f.vars.get("IDEMQ_TABLE").map(String::as_str), Some("jobs"));
        assert_eq!(f.vars.len(), 2);

        let bare = mock!(aws_sdk_lambda::Client::get_function_configuration).then_output(|| {
            GetFunctionConfigurationOutput::builder()
                .function_arn(FUNCTION_ARN)
                .build()
        });
        let f = read_function(&lambda(&[&bare]), FUNCTION).await.unwrap();
        assert!(f.vars.is_empty(), "no environment is an empty one");
    }

    #[tokio::test]
    async fn a_missing_function_is_named_with_its_region() {
        let get = mock!(aws_sdk_lambda::Client::get_function_configuration).then_error(|| {
            GetFunctionConfigurationError::ResourceNotFoundException(
                ResourceNotFoundException::builder()
                    .message(
                        "Function not found: arn:aws:lambda:us-east-1:111122223333:function:nope",
                    )
                    .build(),
            )
        });
        let e = read_function(&lambda(&[&get]), "nope").await.unwrap_err();
        assert_eq!(
            e,
            FunctionError::NotFound {
                function: "nope".into(),
                region: Some("us-east-1".into())
            }
        );
        assert!(e.is_usage());
        assert!(e.to_string().contains("nope not found in us-east-1"), "{e}");
    }

    /// A denial names the IAM action the operator's policy lacks, for
    /// each of the four calls, and exits 1 (not the operator's typing).
    #[tokio::test]
    async fn each_denied_call_names_its_iam_action() {
        let get = mock!(aws_sdk_lambda::Client::get_function_configuration)
            .then_error(|| denied(GetFunctionConfigurationError::generic));
        let e = read_function(&lambda(&[&get]), FUNCTION).await.unwrap_err();
        assert_eq!(
            e,
            FunctionError::Denied {
                action: "lambda:GetFunctionConfiguration",
                resource: FUNCTION.into()
            }
        );
        assert!(!e.is_usage());
        assert!(
            e.to_string()
                .contains("lambda:GetFunctionConfiguration on orders"),
            "{e}"
        );

        let list = mock!(aws_sdk_lambda::Client::list_event_source_mappings)
            .then_error(|| denied(ListEventSourceMappingsError::generic));
        let e = route(&lambda(&[&list]), &sqs(&[]), FUNCTION, true)
            .await
            .unwrap_err();
        assert!(
            matches!(
                e,
                FunctionError::Denied {
                    action: "lambda:ListEventSourceMappings",
                    ..
                }
            ),
            "{e:?}"
        );

        let list = mock!(aws_sdk_lambda::Client::list_event_source_mappings).then_output(|| {
            ListEventSourceMappingsOutput::builder()
                .event_source_mappings(mapping(SOURCE_ARN))
                .build()
        });
        let url = mock!(aws_sdk_sqs::Client::get_queue_url)
            .then_error(|| sqs_denied(GetQueueUrlError::generic));
        let e = route(&lambda(&[&list]), &sqs(&[&url]), FUNCTION, true)
            .await
            .unwrap_err();
        assert_eq!(
            e,
            FunctionError::Denied {
                action: "sqs:GetQueueUrl",
                resource: SOURCE_ARN.into()
            }
        );

        let attrs = mock!(aws_sdk_sqs::Client::get_queue_attributes)
            .then_error(|| sqs_denied(GetQueueAttributesError::generic));
        let e = route(
            &lambda(&[&list]),
            &sqs(&[&get_queue_url(), &attrs]),
            FUNCTION,
            true,
        )
        .await
        .unwrap_err();
        assert!(
            matches!(
                e,
                FunctionError::Denied {
                    action: "sqs:GetQueueAttributes",
                    ..
                }
            ),
            "{e:?}"
        );
    }

    /// Lambda answers with `Environment.Error` when it cannot decrypt the
    /// variables for this caller: said, never taken for an empty
    /// environment (which would silently mean "no table").
    #[tokio::test]
    async fn an_undecryptable_environment_is_an_error() {
        let get = mock!(aws_sdk_lambda::Client::get_function_configuration).then_output(|| {
            GetFunctionConfigurationOutput::builder()
                .function_arn(FUNCTION_ARN)
                .environment(
                    EnvironmentResponse::builder()
                        .error(
                            EnvironmentError::builder()
                                .error_code("AccessDeniedException")
                                .message("Lambda was unable to decrypt the environment variables")
                                .build(),
                        )
                        .build(),
                )
                .build()
        });
        let e = read_function(&lambda(&[&get]), FUNCTION).await.unwrap_err();
        assert!(matches!(e, FunctionError::Environment { .. }), "{e:?}");
        assert!(e.to_string().contains("kms:Decrypt"), "{e}");
    }

    /// Mapping → source queue → its RedrivePolicy → the DLQ's URL. A
    /// Kinesis mapping of the same function is not an SQS source, and a
    /// second page of mappings is read.
    #[tokio::test]
    async fn the_dlq_is_found_through_the_sqs_event_source() {
        let list = mock!(aws_sdk_lambda::Client::list_event_source_mappings)
            .sequence()
            .output(|| {
                ListEventSourceMappingsOutput::builder()
                    .event_source_mappings(mapping(
                        "arn:aws:kinesis:us-east-1:111122223333:stream/clicks",
                    ))
                    .next_marker("page-2")
                    .build()
            })
            .output(|| {
                ListEventSourceMappingsOutput::builder()
                    .event_source_mappings(mapping(SOURCE_ARN))
                    .build()
            })
            .build();
        let policy = r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:111122223333:orders-dlq","maxReceiveCount":6}"#;
        let sqs = sqs(&[
            &get_dlq_url(),
            &get_queue_url(),
            &redrive_policy(Some(policy)),
        ]);
        let r = route(&lambda(&[&list]), &sqs, FUNCTION, true)
            .await
            .unwrap();
        assert_eq!(
            r,
            Route {
                source_arn: SOURCE_ARN.into(),
                source_url: SOURCE_URL.into(),
                dlq_arn: Some(DLQ_ARN.into()),
                dlq_url: Some(DLQ_URL.into()),
            }
        );
    }

    #[tokio::test]
    async fn no_several_or_policy_less_sources_are_each_said() {
        let none = mock!(aws_sdk_lambda::Client::list_event_source_mappings).then_output(|| {
            ListEventSourceMappingsOutput::builder()
                .event_source_mappings(mapping(
                    "arn:aws:dynamodb:us-east-1:111122223333:table/t/stream/x",
                ))
                .build()
        });
        let e = route(&lambda(&[&none]), &sqs(&[]), FUNCTION, true)
            .await
            .unwrap_err();
        assert_eq!(
            e,
            FunctionError::NoSqsSource {
                function: FUNCTION.into()
            }
        );
        assert!(e.is_usage() && e.to_string().contains("--dlq-url"), "{e}");

        let two = mock!(aws_sdk_lambda::Client::list_event_source_mappings).then_output(|| {
            ListEventSourceMappingsOutput::builder()
                .event_source_mappings(mapping(SOURCE_ARN))
                .event_source_mappings(mapping("arn:aws:sqs:us-east-1:111122223333:refunds"))
                // One queue mapped twice (two mappings, say one disabled)
                // is still one source.
                .event_source_mappings(mapping(SOURCE_ARN))
                .build()
        });
        let e = route(&lambda(&[&two]), &sqs(&[]), FUNCTION, true)
            .await
            .unwrap_err();
        let FunctionError::SeveralSqsSources { queues, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(queues.len(), 2);
        assert!(e.to_string().contains("pass --dlq-url"), "{e}");

        let one = mock!(aws_sdk_lambda::Client::list_event_source_mappings).then_output(|| {
            ListEventSourceMappingsOutput::builder()
                .event_source_mappings(mapping(SOURCE_ARN))
                .build()
        });
        let sqs_client = sqs(&[&get_queue_url(), &redrive_policy(None)]);
        let e = route(&lambda(&[&one]), &sqs_client, FUNCTION, true)
            .await
            .unwrap_err();
        assert_eq!(
            e,
            FunctionError::NoRedrivePolicy {
                queue: SOURCE_ARN.into()
            }
        );
        // The source alone (an import's destination) needs no policy.
        let r = route(&lambda(&[&one]), &sqs_client, FUNCTION, false)
            .await
            .unwrap();
        assert_eq!((r.source_url.as_str(), r.dlq_url), (SOURCE_URL, None));
    }

    #[test]
    fn denials_are_known_in_every_form() {
        for code in [
            "AccessDeniedException",
            "AccessDenied",
            "com.amazonaws.sqs#AccessDenied",
            "AccessDenied:Sender",
        ] {
            assert!(is_denied(Some(code)), "{code}");
        }
        assert!(!is_denied(Some("ThrottlingException")));
        assert!(!is_denied(None));
    }
}
