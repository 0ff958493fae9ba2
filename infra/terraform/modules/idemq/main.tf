# idemq: source queue + DLQ (native redrive), the idemq table, the function
# and its event source mapping (function.tf), alarms and a dashboard
# (alarms.tf), and an optional operator policy (operator.tf).

locals {
  dlq_name = "${var.queue_name}-dlq"

  # AWS's rule for SQS event sources: visibility >= 6 x function timeout +
  # batching window, so a batch that is retried by Lambda is not received
  # twice at once.
  visibility_timeout = 6 * var.function_timeout + var.maximum_batching_window

  day                 = 24 * 3600
  dlq_retention_days  = 14 # SQS's longest: a dead letter outlives its original
  replay_window_days  = 1  # config::REPLAY_WINDOW
  marker_margin_days  = 2  # 4 days of source retention gives the default 21d
  marker_ttl_days     = var.source_retention_days + local.dlq_retention_days + local.replay_window_days + local.marker_margin_days
  function_log_group  = "/aws/lambda/${var.name}"
  metrics_namespace   = "idemq"  # src/metrics.rs NAMESPACE
  metrics_queue_label = "Queue"  # src/metrics.rs QUEUE_DIMENSION
  key_prefix          = "idemq#" # src/config.rs TableLayout key_prefix (IDEMQ_KEY_PREFIX is not set)

  # Retries must fit in the source queue's retention: SQS deletes a message
  # whose retention runs out, in flight or not, and never dead-letters it
  # (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_DeleteMessage.html;
  # expiry counts from the original enqueue time,
  # https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/setting-up-dead-letter-queue-retention.html).
  # Each receive keeps a message out of sight for at most the visibility
  # timeout (an invocation that fails whole) or the function's run plus the
  # backoff delay (<= backoff_cap_seconds; the run is shorter than the
  # visibility timeout). The retries must fit in half the retention, the
  # other half being room for waiting to be received (a backlog,
  # throttling). A handler's own retry_after (up to 12 h) is not bounded here.
  # Checked by a precondition on the source queue, at plan time:
  # https://developer.hashicorp.com/terraform/language/expressions/custom-conditions
  retry_span = var.max_receive_count * (local.visibility_timeout + var.backoff_cap_seconds)

  kms_key = var.kms_key_arn
  # Who may send (SendMessage): the named producers, or (none named) this
  # account's principals as their IAM policies allow and no other account.
  account_root    = "arn:${data.aws_partition.current.partition}:iam::${data.aws_caller_identity.current.account_id}:root"
  has_producers   = length(var.producer_principal_arns) > 0
  sender_key      = local.has_producers ? "aws:PrincipalArn" : "aws:PrincipalAccount"
  source_senders  = local.has_producers ? var.producer_principal_arns : [data.aws_caller_identity.current.account_id]
  dlq_senders     = local.has_producers ? concat(var.producer_principal_arns, [aws_iam_role.function.arn]) : [data.aws_caller_identity.current.account_id]
  allowed_senders = local.has_producers ? var.producer_principal_arns : [local.account_root]
}

data "aws_caller_identity" "current" {}

data "aws_partition" "current" {}

# SQS-managed SSE, or the customer managed key when one is given.
resource "aws_sqs_queue" "dlq" {
  name                      = local.dlq_name
  message_retention_seconds = local.dlq_retention_days * local.day
  sqs_managed_sse_enabled   = local.kms_key == "" ? true : null
  kms_master_key_id         = local.kms_key == "" ? null : local.kms_key
}

resource "aws_sqs_queue" "source" {
  name                       = var.queue_name
  visibility_timeout_seconds = local.visibility_timeout
  message_retention_seconds  = var.source_retention_days * local.day
  sqs_managed_sse_enabled    = local.kms_key == "" ? true : null
  kms_master_key_id          = local.kms_key == "" ? null : local.kms_key
  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.dlq.arn
    maxReceiveCount     = var.max_receive_count
  })

  lifecycle {
    precondition {
      condition     = 2 * local.retry_span <= var.source_retention_days * local.day
      error_message = "max_receive_count ${var.max_receive_count} x (visibility timeout ${local.visibility_timeout} s + backoff cap ${var.backoff_cap_seconds} s) = ${local.retry_span} s of retries must fit in half the source retention (${var.source_retention_days} d = ${var.source_retention_days * local.day} s): SQS deletes a message whose retention runs out, in flight or not, and never dead-letters it. Lower max_receive_count or backoff_cap_seconds, or raise source_retention_days."
    }
  }
}

# Who may use the queues. Every request must come over TLS
# (aws:SecureTransport; Amazon SQS security best practices,
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-security-best-practices.html),
# and only the named producers may send: whoever can send chooses job ids,
# and can take a future job's id so that the real job becomes a Conflict.
# Policy language: "Basic examples of Amazon SQS policies",
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-basic-examples-of-sqs-policies.html
data "aws_iam_policy_document" "source_queue" {
  statement {
    sid       = "DenyInsecureTransport"
    effect    = "Deny"
    actions   = ["sqs:*"]
    resources = [aws_sqs_queue.source.arn]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }

  statement {
    sid       = "AllowProducers"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.source.arn]
    principals {
      type        = "AWS"
      identifiers = local.allowed_senders
    }
  }

  statement {
    sid       = "DenyOtherSenders"
    effect    = "Deny"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.source.arn]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "StringNotEquals"
      variable = local.sender_key
      values   = local.source_senders
    }
  }
}

resource "aws_sqs_queue_policy" "source" {
  queue_url = aws_sqs_queue.source.id
  policy    = data.aws_iam_policy_document.source_queue.json
}

# The same for the DLQ, where the function also sends (permanent failures).
data "aws_iam_policy_document" "dlq" {
  statement {
    sid       = "DenyInsecureTransport"
    effect    = "Deny"
    actions   = ["sqs:*"]
    resources = [aws_sqs_queue.dlq.arn]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }

  statement {
    sid       = "AllowProducers"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.dlq.arn]
    principals {
      type        = "AWS"
      identifiers = local.allowed_senders
    }
  }

  statement {
    sid       = "DenyOtherSenders"
    effect    = "Deny"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.dlq.arn]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "StringNotEquals"
      variable = local.sender_key
      values   = local.dlq_senders
    }
  }
}

resource "aws_sqs_queue_policy" "dlq" {
  queue_url = aws_sqs_queue.dlq.id
  policy    = data.aws_iam_policy_document.dlq.json
}

# A resource of its own: inline on the DLQ it would make a cycle with the
# source queue's redrive_policy. Only the source queue may redrive here, so a
# replay always knows where a dead letter came from.
resource "aws_sqs_queue_redrive_allow_policy" "dlq" {
  queue_url = aws_sqs_queue.dlq.id
  redrive_allow_policy = jsonencode({
    redrivePermission = "byQueue"
    sourceQueueArns   = [aws_sqs_queue.source.arn]
  })
}

resource "aws_dynamodb_table" "idemq" {
  name                        = var.table_name
  billing_mode                = "PAY_PER_REQUEST"
  hash_key                    = "pk"
  deletion_protection_enabled = var.table_deletion_protection

  attribute {
    name = "pk"
    type = "S"
  }

  ttl {
    attribute_name = "expires_at"
    enabled        = true
  }

  point_in_time_recovery {
    enabled = true
  }

  # KMS with the AWS managed key (aws/dynamodb), or the customer managed key
  # when one is given.
  server_side_encryption {
    enabled     = true
    kms_key_arn = local.kms_key == "" ? null : local.kms_key
  }
}
