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
  alarm_actions       = var.alarm_topic_arn == "" ? [] : [var.alarm_topic_arn]
  function_log_group  = "/aws/lambda/${var.name}"
  metrics_namespace   = "idemq" # src/metrics.rs NAMESPACE
  metrics_queue_label = "Queue" # src/metrics.rs QUEUE_DIMENSION
}

resource "aws_sqs_queue" "dlq" {
  name                      = local.dlq_name
  message_retention_seconds = local.dlq_retention_days * local.day
  sqs_managed_sse_enabled   = true
}

resource "aws_sqs_queue" "source" {
  name                       = var.queue_name
  visibility_timeout_seconds = local.visibility_timeout
  message_retention_seconds  = var.source_retention_days * local.day
  sqs_managed_sse_enabled    = true
  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.dlq.arn
    maxReceiveCount     = var.max_receive_count
  })
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

  # KMS with the AWS managed key (aws/dynamodb).
  server_side_encryption {
    enabled = true
  }
}
