resource "aws_cloudwatch_log_group" "function" {
  name              = local.function_log_group
  retention_in_days = var.log_retention_days
}

data "aws_iam_policy_document" "assume_lambda" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["lambda.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "function" {
  name               = "${var.name}-function"
  assume_role_policy = data.aws_iam_policy_document.assume_lambda.json
}

# Exactly what the function and its event source mapping call; tests/infra
# derives the action list from the Rust code and compares.
data "aws_iam_policy_document" "function" {
  # Receive/Delete/GetQueueAttributes: the event source mapping.
  # ChangeMessageVisibility: idemq's backoff. GetQueueUrl/GetQueueAttributes:
  # QueueInfo::discover at the first batch.
  statement {
    sid = "SourceQueue"
    actions = [
      "sqs:ReceiveMessage",
      "sqs:DeleteMessage",
      "sqs:ChangeMessageVisibility",
      "sqs:GetQueueAttributes",
      "sqs:GetQueueUrl",
    ]
    resources = [aws_sqs_queue.source.arn]
  }

  # SendMessage: permanent failures go to the DLQ at once. GetQueueUrl and
  # GetQueueAttributes: finding the DLQ, reading its retention.
  statement {
    sid = "DeadLetterQueue"
    actions = [
      "sqs:SendMessage",
      "sqs:GetQueueAttributes",
      "sqs:GetQueueUrl",
    ]
    resources = [aws_sqs_queue.dlq.arn]
  }

  # TransactWriteItems is authorised per item action; GetItem reads a job's
  # marker before its handler runs (IDEMQ_READ_MARKER_FIRST) and when a
  # transaction was cancelled without its copy. A handler whose effects
  # write other tables needs them added here.
  statement {
    sid = "Table"
    actions = [
      "dynamodb:PutItem",
      "dynamodb:UpdateItem",
      "dynamodb:DeleteItem",
      "dynamodb:ConditionCheckItem",
      "dynamodb:GetItem",
    ]
    resources = [aws_dynamodb_table.idemq.arn]
  }

  # idemq's own items (markers <prefix>job#..., failure records
  # <prefix>failure#...) are only ever Put: no handler effect, bug or stolen
  # credential of this role may rewrite or erase a marker, which would let its
  # job be applied again. Effects on the ledger's own keys are untouched. A
  # transaction's items are authorised one by one, by these same item actions.
  # https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/specifying-conditions.html
  # https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis-iam.html
  statement {
    sid       = "ReservedKeysArePutOnly"
    effect    = "Deny"
    actions   = ["dynamodb:UpdateItem", "dynamodb:DeleteItem"]
    resources = [aws_dynamodb_table.idemq.arn]
    condition {
      test     = "ForAnyValue:StringLike"
      variable = "dynamodb:LeadingKeys"
      values   = ["${local.key_prefix}*"]
    }
  }

  # The log group exists (above), so no logs:CreateLogGroup.
  statement {
    sid       = "Logs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.function.arn}:*"]
  }
}

resource "aws_iam_role_policy" "function" {
  name   = "idemq"
  role   = aws_iam_role.function.id
  policy = data.aws_iam_policy_document.function.json
}

# The customer managed key: receiving from and sending to queues encrypted
# with it, and the table's items (Amazon SQS key management: a producer needs
# GenerateDataKey and Decrypt, a consumer Decrypt;
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-key-management.html).
data "aws_iam_policy_document" "function_kms" {
  statement {
    sid       = "KmsKey"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [local.kms_key]
  }
}

resource "aws_iam_role_policy" "function_kms" {
  count  = local.kms_key == "" ? 0 : 1
  name   = "idemq-kms-key"
  role   = aws_iam_role.function.id
  policy = data.aws_iam_policy_document.function_kms.json
}

resource "aws_lambda_function" "this" {
  function_name    = var.name
  role             = aws_iam_role.function.arn
  filename         = var.package_path
  source_code_hash = filebase64sha256(var.package_path)
  handler          = "bootstrap"
  runtime          = "provided.al2023"
  architectures    = ["arm64"]
  memory_size      = var.function_memory
  timeout          = var.function_timeout

  # JSON: idemq writes JSON lines unless the function's log format
  # (AWS_LAMBDA_LOG_FORMAT) is Text.
  logging_config {
    log_format = "JSON"
    log_group  = aws_cloudwatch_log_group.function.name
  }

  environment {
    variables = {
      IDEMQ_TABLE          = aws_dynamodb_table.idemq.name
      IDEMQ_MARKER_TTL     = "${local.marker_ttl_days}d"
      IDEMQ_NAMESPACE      = coalesce(var.namespace, var.queue_name)
      IDEMQ_LEGACY_MARKERS = var.legacy_markers
      IDEMQ_CONCURRENCY    = tostring(var.job_concurrency)
      IDEMQ_BACKOFF_CAP    = "${var.backoff_cap_seconds}s"
      IDEMQ_LOG            = "info"
    }
  }

  # The role's policies must exist before the first invocation.
  depends_on = [aws_iam_role_policy.function, aws_iam_role_policy.function_kms]
}

resource "aws_lambda_event_source_mapping" "jobs" {
  event_source_arn                   = aws_sqs_queue.source.arn
  function_name                      = aws_lambda_function.this.arn
  batch_size                         = var.batch_size
  maximum_batching_window_in_seconds = var.maximum_batching_window
  function_response_types            = ["ReportBatchItemFailures"]
  enabled                            = true

  scaling_config {
    maximum_concurrency = var.maximum_concurrency
  }
}
