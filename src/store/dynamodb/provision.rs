//! The idemq table, created as the templates create it or verified:
//! `idemq init`'s DynamoDB half ([`crate::init`] makes the queues).

use std::time::Duration;

use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, PointInTimeRecoverySpecification,
    PointInTimeRecoveryStatus, ScalarAttributeType, SseSpecification, SseStatus, SseType,
    TableDescription, TableStatus, TimeToLiveSpecification, TimeToLiveStatus,
};
use futures_util::future::BoxFuture;

use crate::config::TableLayout;
use crate::store::{Provision, ProvisionError, Provisioned};

/// How the table is protected beyond what every idemq table has (SSE with
/// KMS and point-in-time recovery, always).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableProtection {
    /// `DeletionProtectionEnabled`: on in the templates (Terraform's
    /// `table_deletion_protection`, default true). The table holds the
    /// markers: deleting it forgets which jobs were applied.
    pub deletion_protection: bool,
}

impl TableProtection {
    /// What the templates create.
    pub const TEMPLATES: Self = Self {
        deletion_protection: true,
    };
}

impl Default for TableProtection {
    fn default() -> Self {
        Self::TEMPLATES
    }
}

/// The idemq table of `layout`, to create or verify ([`Provision`]).
#[derive(Debug, Clone)]
pub struct TableProvisioner {
    ddb: aws_sdk_dynamodb::Client,
    layout: TableLayout,
    protection: TableProtection,
}

impl TableProvisioner {
    /// The table `layout` names, protected as `protection` says.
    pub fn new(
        ddb: aws_sdk_dynamodb::Client,
        layout: TableLayout,
        protection: TableProtection,
    ) -> Self {
        Self {
            ddb,
            layout,
            protection,
        }
    }
}

impl Provision for TableProvisioner {
    fn provision<'a>(
        &'a self,
        violations: &'a mut Vec<String>,
    ) -> BoxFuture<'a, Result<Provisioned, ProvisionError>> {
        Box::pin(async move {
            let created =
                ensure_table(&self.ddb, &self.layout, self.protection, violations).await?;
            Ok(Provisioned {
                name: format!("table {}", self.layout.table_name),
                created,
            })
        })
    }
}

fn store_err(e: impl std::error::Error) -> ProvisionError {
    ProvisionError::Store(DisplayErrorContext(e).to_string())
}

/// Creates the table (one string partition key, on-demand, SSE with KMS,
/// point-in-time recovery, deletion protection as `protection` says, TTL on
/// `expires_at`) or verifies the existing one: a different key or TTL
/// attribute is an error; missing encryption, recovery, protection or
/// on-demand billing is pushed to `violations`. True when it was created.
pub(crate) async fn ensure_table(
    ddb: &aws_sdk_dynamodb::Client,
    layout: &TableLayout,
    protection: TableProtection,
    violations: &mut Vec<String>,
) -> Result<bool, ProvisionError> {
    let mut created = false;
    let table = &layout.table_name;
    match ddb.describe_table().table_name(table).send().await {
        Ok(out) => {
            let keys = out.table().map(|t| t.key_schema()).unwrap_or_default();
            let defs = out
                .table()
                .map(|t| t.attribute_definitions())
                .unwrap_or_default();
            let hash_key = keys.iter().find(|k| k.key_type() == &KeyType::Hash);
            let pk_is_string = defs.iter().any(|d| {
                d.attribute_name() == layout.partition_key
                    && d.attribute_type() == &ScalarAttributeType::S
            });
            if keys.len() != 1
                || hash_key.map(|k| k.attribute_name()) != Some(layout.partition_key.as_str())
                || !pk_is_string
            {
                let found: Vec<String> = keys
                    .iter()
                    .map(|k| format!("{} {}", k.attribute_name(), k.key_type().as_str()))
                    .collect();
                return Err(ProvisionError::Mismatch {
                    resource: format!("table {table}"),
                    attribute: "KeySchema",
                    expected: format!("one string HASH key {:?}", layout.partition_key),
                    found: found.join(", "),
                });
            }
            if let Some(t) = out.table() {
                violations.extend(table_shortfalls(table, t, protection));
            }
            violations.extend(pitr_shortfall(ddb, table).await?);
        }
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_resource_not_found_exception()) =>
        {
            // As the templates: SSESpecification SSEEnabled (KMS, the AWS
            // managed key), DeletionProtectionEnabled, then PITR below.
            // https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_CreateTable.html
            ddb.create_table()
                .table_name(table)
                .billing_mode(BillingMode::PayPerRequest)
                .sse_specification(
                    SseSpecification::builder()
                        .enabled(true)
                        .sse_type(SseType::Kms)
                        .build(),
                )
                .deletion_protection_enabled(protection.deletion_protection)
                .attribute_definitions(
                    AttributeDefinition::builder()
                        .attribute_name(&layout.partition_key)
                        .attribute_type(ScalarAttributeType::S)
                        .build()
                        .map_err(|e| ProvisionError::Store(e.to_string()))?,
                )
                .key_schema(
                    KeySchemaElement::builder()
                        .attribute_name(&layout.partition_key)
                        .key_type(KeyType::Hash)
                        .build()
                        .map_err(|e| ProvisionError::Store(e.to_string()))?,
                )
                .send()
                .await
                .map_err(store_err)?;
            created = true;
            wait_active(ddb, table).await?;
            enable_pitr(ddb, table).await?;
        }
        Err(e) => return Err(store_err(e)),
    }
    ensure_ttl(ddb, layout).await?;
    Ok(created)
}

/// What an existing table lacks of what the templates give it.
fn table_shortfalls(table: &str, t: &TableDescription, protection: TableProtection) -> Vec<String> {
    let mut out = Vec::new();
    let sse = t.sse_description().and_then(|d| d.status());
    if !matches!(sse, Some(SseStatus::Enabled | SseStatus::Enabling)) {
        out.push(format!(
            "table {table} has no KMS encryption (SSEDescription status {}); the templates set \
             SSESpecification SSEEnabled=true (KMS, the AWS managed key)",
            sse.map_or("unset", |s| s.as_str())
        ));
    }
    if protection.deletion_protection && t.deletion_protection_enabled() != Some(true) {
        out.push(format!(
            "table {table} has DeletionProtectionEnabled={}; the templates set true \
             (pass --no-deletion-protection to accept that)",
            t.deletion_protection_enabled().unwrap_or(false)
        ));
    }
    let billing = t.billing_mode_summary().and_then(|b| b.billing_mode());
    let provisioned = t
        .provisioned_throughput()
        .and_then(|p| p.read_capacity_units())
        .is_some_and(|n| n > 0);
    if billing.is_some_and(|b| b != &BillingMode::PayPerRequest)
        || (billing.is_none() && provisioned)
    {
        out.push(format!(
            "table {table} has BillingMode={}; the templates use PAY_PER_REQUEST",
            billing.map_or("PROVISIONED", |b| b.as_str())
        ));
    }
    out
}

/// An existing table without point-in-time recovery, which the templates
/// turn on (`PointInTimeRecoveryEnabled: true`).
async fn pitr_shortfall(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<Option<String>, ProvisionError> {
    let out = ddb
        .describe_continuous_backups()
        .table_name(table)
        .send()
        .await
        .map_err(store_err)?;
    let status = out
        .continuous_backups_description()
        .and_then(|d| d.point_in_time_recovery_description())
        .and_then(|p| p.point_in_time_recovery_status());
    Ok(
        (status != Some(&PointInTimeRecoveryStatus::Enabled)).then(|| {
            format!(
                "table {table} has point-in-time recovery {}; the templates set \
             PointInTimeRecoveryEnabled=true",
                status.map_or("unset", |s| s.as_str())
            )
        }),
    )
}

/// Turns point-in-time recovery on for a table just created. A new table may
/// answer `ContinuousBackupsUnavailableException` ("Backups have not yet
/// been enabled for this table",
/// https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateContinuousBackups.html)
/// for a while: that is waited out.
async fn enable_pitr(ddb: &aws_sdk_dynamodb::Client, table: &str) -> Result<(), ProvisionError> {
    const LIMIT: Duration = Duration::from_secs(120);
    let start = std::time::Instant::now();
    let spec = PointInTimeRecoverySpecification::builder()
        .point_in_time_recovery_enabled(true)
        .build()
        .map_err(|e| ProvisionError::Store(e.to_string()))?;
    loop {
        let sent = ddb
            .update_continuous_backups()
            .table_name(table)
            .point_in_time_recovery_specification(spec.clone())
            .send()
            .await;
        match sent {
            Ok(_) => return Ok(()),
            Err(e)
                if start.elapsed() < LIMIT
                    && e.as_service_error()
                        .is_some_and(|e| e.is_continuous_backups_unavailable_exception()) =>
            {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(store_err(e)),
        }
    }
}

async fn wait_active(ddb: &aws_sdk_dynamodb::Client, table: &str) -> Result<(), ProvisionError> {
    const LIMIT: Duration = Duration::from_secs(120);
    let start = std::time::Instant::now();
    loop {
        let out = ddb
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(store_err)?;
        if out.table().and_then(|t| t.table_status()) == Some(&TableStatus::Active) {
            return Ok(());
        }
        if start.elapsed() > LIMIT {
            return Err(ProvisionError::NotReady(table.to_owned(), LIMIT));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Turns TTL on for the marker's `expires_at`, or checks it already is.
async fn ensure_ttl(
    ddb: &aws_sdk_dynamodb::Client,
    layout: &TableLayout,
) -> Result<(), ProvisionError> {
    let table = &layout.table_name;
    let out = ddb
        .describe_time_to_live()
        .table_name(table)
        .send()
        .await
        .map_err(store_err)?;
    let desc = out.time_to_live_description();
    let status = desc.and_then(|d| d.time_to_live_status());
    let attr = desc.and_then(|d| d.attribute_name());
    match status {
        Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling) => {
            if attr != Some(layout.expires_at.as_str()) {
                return Err(ProvisionError::Mismatch {
                    resource: format!("table {table}"),
                    attribute: "TimeToLive",
                    expected: layout.expires_at.clone(),
                    found: attr.unwrap_or("(none)").to_owned(),
                });
            }
            Ok(())
        }
        _ => {
            let spec = TimeToLiveSpecification::builder()
                .enabled(true)
                .attribute_name(&layout.expires_at)
                .build()
                .map_err(|e| ProvisionError::Store(e.to_string()))?;
            ddb.update_time_to_live()
                .table_name(table)
                .time_to_live_specification(spec)
                .send()
                .await
                .map_err(store_err)?;
            Ok(())
        }
    }
}
