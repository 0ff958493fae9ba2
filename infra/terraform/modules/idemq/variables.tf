# Inputs with safe defaults. The validations are the rules idemq depends on:
# tests/infra evaluates this module over many inputs and checks that every
# input these validations accept deploys a safe configuration.

variable "name" {
  description = "Name of the function; prefixes the alarms and the dashboard (log group /aws/lambda/<name>)."
  type        = string

  validation {
    condition     = can(regex("^[A-Za-z0-9_-]{1,58}$", var.name))
    error_message = "name: 1-58 characters of A-Z a-z 0-9 - _."
  }
}

variable "queue_name" {
  description = "Source queue name; the DLQ is <name>-dlq, as `idemq init` names it."
  type        = string

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
  description = "IDEMQ_LEGACY_MARKERS: read markers of versions before namespaces (off, the default, for a table no such version wrote to; read; until=<upgrade + marker TTL, RFC 3339>)."
  type        = string
  default     = "off"

  validation {
    condition     = can(regex("^(read|off|until=.+)$", var.legacy_markers))
    error_message = "legacy_markers: read, off or until=<RFC 3339 time>."
  }
}

variable "table_name" {
  description = "The idemq table (markers and failure records; your effects may write here too, on keys outside idemq's reserved prefix)."
  type        = string
}

# The function's code: exactly one of package_path, s3_bucket + s3_key, or
# image_uri (a precondition on the function says so).
variable "package_path" {
  description = "A local zip holding your function's `bootstrap` (cargo lambda build --release --arm64 --output-format zip)."
  type        = string
  default     = null
}

variable "s3_bucket" {
  description = "S3 bucket of your function's zip (with s3_key)."
  type        = string
  default     = null
}

variable "s3_key" {
  description = "S3 key of your function's zip (with s3_bucket)."
  type        = string
  default     = null
}

variable "s3_object_version" {
  description = "Version of the S3 object (optional, with s3_bucket and s3_key)."
  type        = string
  default     = null
}

variable "image_uri" {
  description = "An ECR image of your function (arm64, built on the provided.al2023 base image)."
  type        = string
  default     = null
}

variable "environment" {
  description = "Your function's own environment variables (your tables, your follow-up queues). idemq's own (IDEMQ_TABLE, IDEMQ_MARKER_TTL, ...) come from this module's inputs and may not be set here."
  type        = map(string)
  default     = {}

  validation {
    # Set by this module, or assumed by its table layout and its Deny on
    # idemq's reserved keys.
    condition = length(setintersection(keys(var.environment), [
      "IDEMQ_TABLE", "IDEMQ_MARKER_TTL", "IDEMQ_NAMESPACE", "IDEMQ_LEGACY_MARKERS", "IDEMQ_CONCURRENCY",
      "IDEMQ_BACKOFF_CAP", "IDEMQ_ENVELOPE", "IDEMQ_JOB_ID_POINTER", "IDEMQ_KEY_PREFIX", "IDEMQ_ATTR_PK",
      "IDEMQ_ATTR_EXPIRES_AT",
    ])) == 0
    error_message = "environment: IDEMQ_TABLE, IDEMQ_MARKER_TTL, IDEMQ_NAMESPACE, IDEMQ_LEGACY_MARKERS, IDEMQ_CONCURRENCY, IDEMQ_BACKOFF_CAP, IDEMQ_ENVELOPE and IDEMQ_JOB_ID_POINTER come from this module's inputs; IDEMQ_KEY_PREFIX and IDEMQ_ATTR_* would break the table layout and the role's guard of idemq's own items."
  }
}

variable "envelope" {
  description = "IDEMQ_ENVELOPE: what wraps each job's body (none; sns: an SNS notification; eventbridge: an EventBridge event)."
  type        = string
  default     = "none"

  validation {
    condition     = contains(["none", "sns", "eventbridge"], var.envelope)
    error_message = "envelope: none, sns or eventbridge."
  }
}

variable "job_id_pointer" {
  description = "IDEMQ_JOB_ID_POINTER: a JSON pointer to the job id in the body (e.g. /transfer_id), for messages without an idemq-job-id attribute. Empty: none."
  type        = string
  default     = ""

  validation {
    condition     = can(regex("^(/.*)?$", var.job_id_pointer))
    error_message = "job_id_pointer: a JSON pointer starting with /, or empty."
  }
}

variable "effect_table_arns" {
  description = "Your own DynamoDB tables (ARNs) that your handler's effects write: the role may put, update, delete, condition-check and get their items."
  type        = list(string)
  default     = []
}

variable "follow_up_queue_arns" {
  description = "Queues (ARNs) your handler sends follow-up jobs to (sqs:SendMessage)."
  type        = list(string)
  default     = []
}

variable "extra_policy_statements" {
  description = "More IAM statements for the function's role, as IAM JSON objects ({ Effect, Action, Resource, Condition }). Whatever they allow, the role's Deny statements keep idemq's table and queues to what idemq calls."
  type        = any
  default     = []
}

variable "extra_policy_arns" {
  description = "Managed policies (ARNs) to attach to the function's role. The role's Deny statements keep idemq's table and queues to what idemq calls, whatever they allow."
  type        = list(string)
  default     = []
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

variable "alarm_actions" {
  description = "SNS topics (ARNs) notified when an alarm fires (empty: no actions)."
  type        = list(string)
  default     = []
}

variable "ok_actions" {
  description = "SNS topics (ARNs) notified when an alarm returns to OK (empty: no actions)."
  type        = list(string)
  default     = []
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
