//! `idemq init`'s table set-up against responses the emulators do not give,
//! with `aws-smithy-mocks` standing in for DynamoDB.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::operation::create_table::CreateTableOutput;
use aws_sdk_dynamodb::operation::describe_table::{DescribeTableError, DescribeTableOutput};
use aws_sdk_dynamodb::operation::describe_time_to_live::DescribeTimeToLiveOutput;
use aws_sdk_dynamodb::operation::update_continuous_backups::{
    UpdateContinuousBackupsError, UpdateContinuousBackupsOutput,
};
use aws_sdk_dynamodb::operation::update_time_to_live::UpdateTimeToLiveOutput;
use aws_sdk_dynamodb::types::error::{
    ContinuousBackupsUnavailableException, ResourceNotFoundException,
};
use aws_sdk_dynamodb::types::{SseType, TableDescription, TableStatus};
use aws_smithy_mocks::{RuleMode, mock, mock_client};
use idemq::config::TableLayout;

/// On AWS a table just created may refuse `UpdateContinuousBackups` with
/// `ContinuousBackupsUnavailableException` ("Backups have not yet been
/// enabled for this table",
/// https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateContinuousBackups.html);
/// moto never does. init waits it out and turns point-in-time recovery on,
/// and creates the table encrypted with KMS and deletion-protected, as the
/// templates do.
#[tokio::test]
async fn new_table_gets_pitr_after_backups_become_available() {
    let describe = mock!(Client::describe_table)
        .sequence()
        .error(|| {
            DescribeTableError::ResourceNotFoundException(
                ResourceNotFoundException::builder()
                    .message("no table")
                    .build(),
            )
        })
        .output(|| {
            DescribeTableOutput::builder()
                .table(
                    TableDescription::builder()
                        .table_status(TableStatus::Active)
                        .build(),
                )
                .build()
        })
        .build();
    let create = mock!(Client::create_table)
        .match_requests(|req| {
            req.deletion_protection_enabled() == Some(true)
                && req.sse_specification().is_some_and(|s| {
                    s.enabled() == Some(true) && s.sse_type() == Some(&SseType::Kms)
                })
        })
        .then_output(|| CreateTableOutput::builder().build());
    let pitr = mock!(Client::update_continuous_backups)
        .match_requests(|req| {
            req.point_in_time_recovery_specification()
                .is_some_and(|p| p.point_in_time_recovery_enabled())
        })
        .sequence()
        .error(|| {
            UpdateContinuousBackupsError::ContinuousBackupsUnavailableException(
                ContinuousBackupsUnavailableException::builder()
                    .message("Backups are being enabled for the table")
                    .build(),
            )
        })
        .times(2)
        .output(|| UpdateContinuousBackupsOutput::builder().build())
        .build();
    let ttl = mock!(Client::describe_time_to_live)
        .then_output(|| DescribeTimeToLiveOutput::builder().build());
    let set_ttl = mock!(Client::update_time_to_live)
        .then_output(|| UpdateTimeToLiveOutput::builder().build());
    let client = mock_client!(
        aws_sdk_dynamodb,
        RuleMode::MatchAny,
        &[&describe, &create, &pitr, &ttl, &set_ttl],
        |c| c.retry_config(RetryConfig::disabled())
    );
    let created = idemq::init::ensure_table(&client, &TableLayout::new("t"))
        .await
        .expect("ensure_table");
    assert!(created);
    assert_eq!(
        create.num_calls(),
        1,
        "CreateTable with SSE and deletion protection"
    );
    assert_eq!(pitr.num_calls(), 3, "two refusals waited out, then enabled");
    assert_eq!(set_ttl.num_calls(), 1);
}
