# Inputs with safe defaults. The validations are the rules idemq depends on:
# tests/infra evaluates this module over many inputs and checks that every
# input these validations accept deploys a safe configuration.

variable "name" {
  description = "Name of the function; prefixes the alarms and the dashboard."
  type        = string
  default     = "idemq-ledger"
}

variable "queue_name" {
  description = "Source queue name; the DLQ is <name>-dlq, as `idemq init` names it."
  type        = string
  default     = "idemq-ledger"

  validation {
    condition     = can(regex("^[A-Za-z0-9_-]{1,76}$", var.queue_name))
    error_message = "queue_name: 1-76 characters of A-Z a-z 0-9 - _ (the DLQ adds -dlq)."
  }
}

variable "namespace" {
  description = "The consumer's namespace in the table (IDEMQ_NAMESPACE); null: queue_name. Keep it when renaming the queue, or committed jobs run again."
  type        = string
  default     = null

  validation {
    condition     = var.namespace == null || can(regex("^[A-Za-z0-9_.-]{1,80}$", var.namespace))
    error_message = "namespace: 1-80 characters of A-Z a-z 0-9 - _ ."
  }
}

variable "legacy_markers" {
  description = "IDEMQ_LEGACY_MARKERS: read markers of versions before namespaces (read; until=<upgrade + marker TTL, RFC 3339>; off for a new table)."
  type        = string
  default     = "read"

  validation {
    condition     = can(regex("^(read|off|until=.+)$", var.legacy_markers))
    error_message = "legacy_markers: read, off or until=<RFC 3339 time>."
  }
}

variable "table_name" {
  description = "The idemq table (markers and failure records; the ledger writes here too)."
  type        = string
  default     = "idemq-ledger"
}

variable "package_path" {
  description = "Zip holding the function's `bootstrap` (cargo lambda build --release --arm64 --example ledger --output-format zip)."
  type        = string
}

variable "function_timeout" {
  description = "Lambda timeout in seconds. The queue's visibility timeout follows from it."
  type        = number
  default     = 30

  validation {
    condition     = var.function_timeout >= 1 && var.function_timeout <= 900
    error_message = "function_timeout: 1 to 900 seconds."
  }
}

variable "function_memory" {
  description = "Lambda memory in MB."
  type        = number
  default     = 256

  validation {
    condition     = var.function_memory >= 128 && var.function_memory <= 10240
    error_message = "function_memory: 128 to 10240 MB."
  }
}

variable "job_concurrency" {
  description = "Jobs of one batch run at once inside the function (IDEMQ_CONCURRENCY)."
  type        = number
  default     = 10

  validation {
    condition     = var.job_concurrency >= 1 && var.job_concurrency <= 1000
    error_message = "job_concurrency: 1 to 1000."
  }
}

variable "batch_size" {
  description = "Messages per invocation. Above 10, maximum_batching_window must be at least 1."
  type        = number
  default     = 10

  validation {
    condition     = var.batch_size >= 1 && var.batch_size <= 10000
    error_message = "batch_size: 1 to 10000."
  }
}

variable "maximum_batching_window" {
  description = "Seconds the event source mapping may wait to fill a batch."
  type        = number
  default     = 1

  validation {
    condition     = var.maximum_batching_window >= 0 && var.maximum_batching_window <= 300
    error_message = "maximum_batching_window: 0 to 300 seconds."
  }
}

variable "maximum_concurrency" {
  description = "Concurrent invocations the event source mapping may use (scaling_config)."
  type        = number
  default     = 10

  validation {
    condition     = var.maximum_concurrency >= 2 && var.maximum_concurrency <= 1000
    error_message = "maximum_concurrency: 2 to 1000."
  }
}

variable "max_receive_count" {
  description = "Receives before SQS redrives a message to the DLQ."
  type        = number
  default     = 6

  validation {
    # Fewer receives leave too little room for backoff to ride out an outage.
    condition     = var.max_receive_count >= 5 && var.max_receive_count <= 1000
    error_message = "max_receive_count: 5 to 1000."
  }
}

variable "source_retention_days" {
  description = "Source queue retention in days. The marker TTL follows from it."
  type        = number
  default     = 4

  validation {
    # Strictly below the DLQ's 14 days, so a dead letter outlives its original.
    condition     = var.source_retention_days >= 1 && var.source_retention_days <= 13 && floor(var.source_retention_days) == var.source_retention_days
    error_message = "source_retention_days: a whole number from 1 to 13 (the DLQ keeps 14)."
  }
}

variable "backoff_cap_seconds" {
  description = "The function's backoff ceiling (IDEMQ_BACKOFF_CAP). max_receive_count x (visibility timeout + this) must fit in half the source retention."
  type        = number
  default     = 900

  validation {
    # src/backoff.rs: a cap over SQS's 12 h visibility limit is refused.
    condition     = var.backoff_cap_seconds >= 1 && var.backoff_cap_seconds <= 43200 && floor(var.backoff_cap_seconds) == var.backoff_cap_seconds
    error_message = "backoff_cap_seconds: a whole number from 1 to 43200 (12 h)."
  }
}

variable "producer_principal_arns" {
  description = "IAM role/user ARNs that may send jobs (SendMessage) to the queue and the DLQ; include the roles that run `idemq send` and `idemq dlq redrive/import`. Whoever can send chooses job ids (docs/operations.md, Security model). Empty: principals of this account whose own IAM policies allow it, and no other account."
  type        = list(string)
  default     = []
}

variable "kms_key_arn" {
  description = "A customer managed KMS key (ARN) for both queues and the table. Empty: SQS-managed SSE and DynamoDB's AWS managed key. The key policy must let this module's roles, the producers and the operators use it."
  type        = string
  default     = ""

  validation {
    condition     = can(regex("^(arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/[A-Za-z0-9-]+)?$", var.kms_key_arn))
    error_message = "kms_key_arn: a KMS key ARN (arn:aws:kms:REGION:ACCOUNT:key/ID), or empty."
  }
}

variable "alarm_topic_arn" {
  description = "SNS topic for alarm and OK notifications (empty: alarms without actions)."
  type        = string
  default     = ""
}

variable "oldest_message_age_threshold" {
  description = "Seconds the oldest source message may wait before the alarm fires."
  type        = number
  default     = 300
}

variable "dead_letter_rate_threshold_percent" {
  description = "Percent of received jobs dead-lettered in 5 minutes that raises the alarm."
  type        = number
  default     = 1
}

variable "retry_rate_threshold_percent" {
  description = "Percent of received jobs retried, 15 minutes running, that raises the alarm."
  type        = number
  default     = 10
}

variable "log_retention_days" {
  description = "Retention of the function's log group."
  type        = number
  default     = 30
}

variable "table_deletion_protection" {
  description = "The table holds the dedup markers: keep it unless you mean to forget which jobs ran."
  type        = bool
  default     = true
}

variable "create_operator_policy" {
  description = "Also create a policy with what `idemq send` and `idemq dlq` call on these resources."
  type        = bool
  default     = false
}

variable "create_bootstrap_policy" {
  description = "Also create a policy with what `idemq init` calls (create/verify the queues and the table)."
  type        = bool
  default     = false
}
