//! A commit refused because of how the function was deployed, not because
//! of the job: its role lacks a permission on a table it writes
//! (`AccessDeniedException`), or the table does not exist
//! (`ResourceNotFoundException`). Every job fails the same way until a
//! deploy fixes it, so the error names what to fix: each permission the
//! request needed, on which table.
//!
//! A transaction needs, per item, the permission of the write it makes:
//! "Permissions for Put, Update, Delete, and Get actions are governed by
//! the permissions used for the underlying PutItem, UpdateItem, DeleteItem,
//! and GetItem operations. For the ConditionCheck action, you can use the
//! dynamodb:ConditionCheckItem permission"
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis-iam.html>).
//! DynamoDB's own message names the one it refused and is kept beside
//! them; a missing table's message does not say which inside a
//! transaction, so every table written is named.

use super::{CommitError, Committer};
use crate::store::dynamodb::effect::{Effect, WriteKind};

/// The permissions one commit's request needs: `(action, table)`, in
/// request order, without repeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Needs(Vec<(&'static str, String)>);

/// Whether a DynamoDB error code says the caller may not make the request.
/// `AccessDeniedException` is not in the operations' modelled errors, so it
/// arrives as an unhandled error with that code
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/CommonErrors.html>).
pub(super) fn is_access_denied(code: Option<&str>) -> bool {
    code == Some("AccessDeniedException")
}

impl Needs {
    /// What the look-up before the handler needs: `BatchGetItem` on
    /// `table`.
    pub(super) fn batch_read(table: &str) -> Self {
        Self(vec![("dynamodb:BatchGetItem", table.to_owned())])
    }

    /// `dynamodb:PutItem on table a, dynamodb:UpdateItem on table b`.
    fn permissions(&self) -> String {
        self.0
            .iter()
            .map(|(action, table)| format!("{action} on table {table}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Every table the request writes, `a or b`.
    fn tables(&self) -> String {
        let mut tables: Vec<&str> = Vec::new();
        for (_, table) in &self.0 {
            if !tables.contains(&table.as_str()) {
                tables.push(table);
            }
        }
        tables.join(" or ")
    }

    /// `ResourceNotFoundException`, logged as the deployment error it is.
    pub(super) fn table_missing(&self) -> CommitError {
        let tables = self.tables();
        tracing::error!(
            table = tables,
            "a table the commit writes does not exist: a deployment error, \
             every job fails alike until a deploy fixes it (jobs are retried)"
        );
        CommitError::TableNotFound(tables)
    }

    /// `AccessDeniedException`, logged as the deployment error it is.
    pub(super) fn access_denied(&self, message: &str) -> CommitError {
        let needs = self.permissions();
        tracing::error!(
            needs,
            dynamodb = message,
            "the function's role lacks a permission the commit needs: a deployment error, \
             every job fails alike until a deploy fixes it (jobs are retried)"
        );
        CommitError::AccessDenied {
            needs,
            message: message.to_owned(),
        }
    }
}

impl Committer {
    /// What committing `effect` asks of the role: `PutItem` on the idemq
    /// table for a separate marker, then each write's own action.
    pub(super) fn needs(&self, effect: &Effect) -> Needs {
        let mut needs: Vec<(&'static str, String)> = Vec::new();
        if effect.uses_separate_marker() {
            needs.push(("dynamodb:PutItem", self.layout.table_name.clone()));
        }
        for write in effect.writes() {
            let action = match write.kind() {
                WriteKind::Put { .. } => "dynamodb:PutItem",
                WriteKind::Update { .. } => "dynamodb:UpdateItem",
                WriteKind::Delete => "dynamodb:DeleteItem",
                WriteKind::ConditionCheck => "dynamodb:ConditionCheckItem",
            };
            let need = (action, write.table().to_owned());
            if !needs.contains(&need) {
                needs.push(need);
            }
        }
        Needs(needs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TableLayout;
    use crate::store::dynamodb::effect::{Key, Write};
    use aws_sdk_dynamodb::types::AttributeValue;
    use std::time::Duration;

    fn committer() -> Committer {
        let conf = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .build();
        Committer::new(
            aws_sdk_dynamodb::Client::from_conf(conf),
            TableLayout::new("idemq"),
            Duration::from_secs(60),
        )
    }

    #[test]
    fn needs_name_each_action_and_table_once() {
        let effect = Effect::new()
            .with(
                Write::update("accounts", Key::string("pk", "a"), "ADD n :one")
                    .value(":one", AttributeValue::N("1".into())),
            )
            .with(
                Write::update("accounts", Key::string("pk", "b"), "ADD n :one")
                    .value(":one", AttributeValue::N("1".into())),
            )
            .with(Write::condition_check(
                "limits",
                Key::string("pk", "l"),
                "attribute_exists(pk)",
            ));
        let needs = committer().needs(&effect);
        assert_eq!(
            needs.permissions(),
            "dynamodb:PutItem on table idemq, dynamodb:UpdateItem on table accounts, \
             dynamodb:ConditionCheckItem on table limits"
        );
        assert_eq!(needs.tables(), "idemq or accounts or limits");
        match needs.access_denied("not authorized") {
            CommitError::AccessDenied { needs, message } => {
                assert!(needs.contains("dynamodb:UpdateItem on table accounts"));
                assert_eq!(message, "not authorized");
            }
            other => panic!("{other:?}"),
        }
    }
}
