//! The table's name and attribute names, and the consumer's namespace
//! ([`TableLayout`]): what changes only with the table.

use super::ConfigError;

/// Attribute names of the idemq table. The table has one string partition
/// key and DynamoDB TTL enabled on `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableLayout {
    /// The table's name (`IDEMQ_TABLE`).
    pub table_name: String,
    /// The string partition key (`IDEMQ_ATTR_PK`, default `pk`).
    pub partition_key: String,
    /// The TTL attribute, epoch seconds (`IDEMQ_ATTR_EXPIRES_AT`, default
    /// `expires_at`).
    pub expires_at: String,
    /// A marker's job id (`job_id`).
    pub job_id: String,
    /// A marker's payload hash (`payload_hash`), compared on a duplicate.
    pub payload_hash: String,
    /// When a marker was committed (`committed_at`).
    pub committed_at: String,
    /// A marker's source queue name (`queue`).
    pub queue: String,
    /// Every key idemq writes starts with this; effects may not use it.
    pub key_prefix: String,
    /// The consumer's namespace (`IDEMQ_NAMESPACE`), part of every marker,
    /// failure-record and downstream key; `None`: the source queue's name.
    /// See [`TableLayout::namespace_for`].
    pub namespace: Option<String>,
}

impl TableLayout {
    /// The default attribute names (`pk`, `expires_at`, `job_id`,
    /// `payload_hash`, `committed_at`, `queue`) and key prefix (`idemq#`)
    /// for the table `table_name`.
    pub fn new(table_name: impl Into<String>) -> Self {
        Self {
            table_name: table_name.into(),
            partition_key: "pk".into(),
            expires_at: "expires_at".into(),
            job_id: "job_id".into(),
            payload_hash: "payload_hash".into(),
            committed_at: "committed_at".into(),
            queue: "queue".into(),
            key_prefix: "idemq#".into(),
            namespace: None,
        }
    }

    /// This layout with the namespace `namespace` (see
    /// [`TableLayout::namespace_for`]).
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Result<Self, ConfigError> {
        let namespace = namespace.into();
        check_namespace(&namespace)?;
        self.namespace = Some(namespace);
        Ok(self)
    }

    /// The namespace of a consumer reading the queue `queue` (a name, URL
    /// or ARN): `IDEMQ_NAMESPACE` when set, else the queue's name.
    ///
    /// Two consumers that share a table (an SNS topic or an EventBridge
    /// rule fanning out to two queues) must each apply every job, so each
    /// needs its own marker; one consumer must find its own marker on every
    /// copy of a job. The queue's *name* is the default because it names the
    /// consumer and is the same on every copy: a redrive (SQS's or `idemq
    /// dlq redrive`) sends the job back to the queue it came from, and a
    /// redeploy keeps the queue. A `MessageId`, a function version or an
    /// ARN (with its account and region) would not be. Renaming (replacing)
    /// the queue starts a new namespace: jobs committed under the old name
    /// are not recognised on the new queue, so set `IDEMQ_NAMESPACE` to the
    /// old name before renaming. A consumer that reads several queues and
    /// must dedup across them sets one `IDEMQ_NAMESPACE` for all.
    pub fn namespace_for<'a>(&'a self, queue: &'a str) -> &'a str {
        self.namespace
            .as_deref()
            .unwrap_or_else(|| queue_name(queue))
    }

    /// The key of a job's dedup marker in `namespace`. The `ns#` part keeps
    /// these keys apart from every [`TableLayout::legacy_marker_key`].
    pub fn marker_key(&self, namespace: &str, job_id: &str) -> String {
        format!("{}ns#{namespace}#job#{job_id}", self.key_prefix)
    }

    /// The key a marker had before markers were namespaced (still read
    /// while [`LegacyMarkers`](super::LegacyMarkers) says so, so that a job committed by an
    /// earlier version is not applied again).
    pub fn legacy_marker_key(&self, job_id: &str) -> String {
        format!("{}job#{job_id}", self.key_prefix)
    }

    /// The key of a failure record in `namespace`: by job id, or by
    /// `MessageId` for a message without a valid job id.
    pub fn failure_key(&self, namespace: &str, job_id: Option<&str>, message_id: &str) -> String {
        format!(
            "{}ns#{namespace}#{}",
            self.key_prefix,
            failure_suffix(job_id, message_id)
        )
    }

    /// The key a failure record had before records were namespaced.
    pub fn legacy_failure_key(&self, job_id: Option<&str>, message_id: &str) -> String {
        format!("{}{}", self.key_prefix, failure_suffix(job_id, message_id))
    }

    /// `IDEMQ_TABLE` (required) and the optional `IDEMQ_ATTR_PK`,
    /// `IDEMQ_ATTR_EXPIRES_AT`, `IDEMQ_KEY_PREFIX` overrides.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_env_with_table(None)
    }

    /// The one way every idemq program (consumer, `idemq init`, every
    /// `idemq dlq` command) builds its layout: the table from `table` when
    /// given (a `--table` flag), else `IDEMQ_TABLE`; the attribute names and
    /// key prefix from the same `IDEMQ_ATTR_*` / `IDEMQ_KEY_PREFIX`
    /// variables as the consumer, so all of them read and write the same
    /// keys.
    pub fn from_env_with_table(table: Option<String>) -> Result<Self, ConfigError> {
        Self::from_lookup(|k| match (k, &table) {
            ("IDEMQ_TABLE", Some(t)) => Some(t.clone()),
            _ => std::env::var(k).ok(),
        })
    }

    /// The variables that set the layout, for a program that prints which
    /// layout it used.
    pub const ENV_VARS: [&'static str; 5] = [
        "IDEMQ_TABLE",
        "IDEMQ_ATTR_PK",
        "IDEMQ_ATTR_EXPIRES_AT",
        "IDEMQ_KEY_PREFIX",
        "IDEMQ_NAMESPACE",
    ];

    pub(crate) fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let table = get("IDEMQ_TABLE")
            .filter(|t| !t.is_empty())
            .ok_or(ConfigError::Missing("IDEMQ_TABLE"))?;
        let mut layout = Self::new(table);
        for (var, slot) in [
            ("IDEMQ_ATTR_PK", &mut layout.partition_key),
            ("IDEMQ_ATTR_EXPIRES_AT", &mut layout.expires_at),
            ("IDEMQ_KEY_PREFIX", &mut layout.key_prefix),
        ] {
            if let Some(v) = get(var) {
                if v.is_empty() {
                    return Err(ConfigError::Invalid {
                        var,
                        value: v,
                        why: "must not be empty".into(),
                    });
                }
                *slot = v;
            }
        }
        if let Some(ns) = get("IDEMQ_NAMESPACE").filter(|ns| !ns.is_empty()) {
            layout = layout.with_namespace(ns)?;
        }
        Ok(layout)
    }
}

fn failure_suffix(job_id: Option<&str>, message_id: &str) -> String {
    match job_id {
        Some(id) => format!("failure#{id}"),
        None => format!("failure-message#{message_id}"),
    }
}

/// The name of a queue given by name, URL (`…/<account>/<name>`) or ARN
/// (`arn:aws:sqs:<region>:<account>:<name>`).
pub fn queue_name(queue: &str) -> &str {
    queue.rsplit(['/', ':']).next().unwrap_or(queue)
}

/// A namespace is a queue name's alphabet (letters, digits, `-`, `_`, `.`),
/// 1 to 80 characters, so the queue-name default always fits and no
/// namespace can contain the `#` that separates the parts of a key.
pub(crate) fn check_namespace(ns: &str) -> Result<(), ConfigError> {
    let ok = (1..=80).contains(&ns.len())
        && ns
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        return Ok(());
    }
    Err(ConfigError::Invalid {
        var: "IDEMQ_NAMESPACE",
        value: ns.to_owned(),
        why: "1 to 80 letters, digits, '-', '_' or '.' (a queue name's characters)".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_env::env;

    #[test]
    fn layout_from_env() {
        assert_eq!(
            TableLayout::from_lookup(env(&[])),
            Err(ConfigError::Missing("IDEMQ_TABLE"))
        );
        let l = TableLayout::from_lookup(env(&[("IDEMQ_TABLE", "jobs")])).unwrap();
        assert_eq!(l, TableLayout::new("jobs"));
        assert_eq!(l.marker_key("q", "t-1"), "idemq#ns#q#job#t-1");
        assert_eq!(l.legacy_marker_key("t-1"), "idemq#job#t-1");
        assert_eq!(
            l.namespace_for("https://sqs.x/000000000000/orders"),
            "orders"
        );
        assert_eq!(
            l.namespace_for("arn:aws:sqs:eu-west-1:0:orders.fifo"),
            "orders.fifo"
        );
        let l = TableLayout::from_lookup(env(&[
            ("IDEMQ_TABLE", "jobs"),
            ("IDEMQ_NAMESPACE", "billing"),
        ]))
        .unwrap();
        assert_eq!(l.namespace_for("orders"), "billing");
        assert_eq!(
            l.failure_key("billing", Some("t-1"), "m"),
            "idemq#ns#billing#failure#t-1"
        );
        assert_eq!(l.legacy_failure_key(None, "m"), "idemq#failure-message#m");
        for bad in ["a#b", "a b", &"x".repeat(81)] {
            assert!(
                TableLayout::from_lookup(env(&[("IDEMQ_TABLE", "jobs"), ("IDEMQ_NAMESPACE", bad)]))
                    .is_err(),
                "{bad}"
            );
        }
        let l = TableLayout::from_lookup(env(&[
            ("IDEMQ_TABLE", "jobs"),
            ("IDEMQ_ATTR_PK", "id"),
            ("IDEMQ_ATTR_EXPIRES_AT", "ttl"),
        ]))
        .unwrap();
        assert_eq!(
            (l.partition_key.as_str(), l.expires_at.as_str()),
            ("id", "ttl")
        );
        assert!(matches!(
            TableLayout::from_lookup(env(&[("IDEMQ_TABLE", "jobs"), ("IDEMQ_ATTR_PK", "")])),
            Err(ConfigError::Invalid {
                var: "IDEMQ_ATTR_PK",
                ..
            })
        ));
    }
}
