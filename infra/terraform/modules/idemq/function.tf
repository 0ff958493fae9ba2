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

  # TransactWriteItems is authorised per item action; BatchGetItem reads a
  # batch's markers before its handlers run (IDEMQ_READ_MARKER_FIRST), and
  # GetItem one marker when a transaction was cancelled without its copy. A handler whose effects
  # write other tables: effect_table_arns.
  statement {
    sid = "Table"
    actions = [
      "dynamodb:PutItem",
      "dynamodb:UpdateItem",
      "dynamodb:DeleteItem",
      "dynamodb:ConditionCheckItem",
      "dynamodb:BatchGetItem",
      "dynamodb:GetItem",
    ]
    resources = [aws_dynamodb_table.idemq.arn]
  }

  # Whatever else this role is given (effect_table_arns,
  # follow_up_queue_arns, extra_policy_statements, extra_policy_arns), on
  # idemq's own table and queues it may do only what idemq calls: an explicit
  # Deny overrides every Allow ("Policy evaluation logic",
  # https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html).
  # A managed policy granting dynamodb:* on * cannot reach a marker through
  # BatchWriteItem or drop the table.
  statement {
    sid    = "TableOnlyWhatIdemqCalls"
    effect = "Deny"
    not_actions = [
      "dynamodb:PutItem",
      "dynamodb:UpdateItem",
      "dynamodb:DeleteItem",
      "dynamodb:ConditionCheckItem",
      "dynamodb:BatchGetItem",
      "dynamodb:GetItem",
    ]
    resources = [aws_dynamodb_table.idemq.arn]
  }

  statement {
    sid    = "SourceQueueOnlyWhatIdemqCalls"
    effect = "Deny"
    not_actions = [
      "sqs:ReceiveMessage",
      "sqs:DeleteMessage",
      "sqs:ChangeMessageVisibility",
      "sqs:GetQueueAttributes",
      "sqs:GetQueueUrl",
    ]
    resources = [aws_sqs_queue.source.arn]
  }

  statement {
    sid    = "DeadLetterQueueOnlyWhatIdemqCalls"
    effect = "Deny"
    not_actions = [
      "sqs:SendMessage",
      "sqs:GetQueueAttributes",
      "sqs:GetQueueUrl",
    ]
    resources = [aws_sqs_queue.dlq.arn]
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

# Your handler's own resources: its tables (the item actions a
# TransactWriteItems of its effects is authorised by, and GetItem for its
# reads), its follow-up queues, and any statements of your own.
locals {
  extra_statements = concat(
    length(var.effect_table_arns) == 0 ? [] : [{
      Sid      = "EffectTables"
      Effect   = "Allow"
      Action   = ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem", "dynamodb:GetItem"]
      Resource = var.effect_table_arns
    }],
    length(var.follow_up_queue_arns) == 0 ? [] : [{
      Sid      = "FollowUpQueues"
      Effect   = "Allow"
      Action   = ["sqs:SendMessage"]
      Resource = var.follow_up_queue_arns
    }],
    var.extra_policy_statements,
  )
}

resource "aws_iam_role_policy" "extra" {
  count  = length(local.extra_statements) == 0 ? 0 : 1
  name   = "handler"
  role   = aws_iam_role.function.id
  policy = jsonencode({ Version = "2012-10-17", Statement = local.extra_statements })
}

resource "aws_iam_role_policy_attachment" "extra" {
  count      = length(var.extra_policy_arns)
  role       = aws_iam_role.function.name
  policy_arn = var.extra_policy_arns[count.index]
}

resource "aws_lambda_function" "this" {
  function_name = var.name
  role          = aws_iam_role.function.arn
  # Your code: a local zip, an S3 object, or an image.
  package_type      = var.image_uri == null ? "Zip" : "Image"
  filename          = var.package_path
  source_code_hash  = var.package_path == null ? null : filebase64sha256(var.package_path)
  s3_bucket         = var.s3_bucket
  s3_key            = var.s3_key
  s3_object_version = var.s3_object_version
  image_uri         = var.image_uri
  handler           = var.image_uri == null ? "bootstrap" : null
  runtime           = var.image_uri == null ? "provided.al2023" : null
  architectures     = ["arm64"]
  memory_size       = var.function_memory
  timeout           = var.function_timeout

  # JSON: idemq writes JSON lines unless the function's log format
  # (AWS_LAMBDA_LOG_FORMAT) is Text.
  logging_config {
    log_format = "JSON"
    log_group  = aws_cloudwatch_log_group.function.name
  }

  # Yours, then idemq's (your keys may not name idemq's: a validation of
  # var.environment refuses them).
  environment {
    variables = merge({ IDEMQ_LOG = "info" }, var.environment, {
      IDEMQ_TABLE          = aws_dynamodb_table.idemq.name
      IDEMQ_MARKER_TTL     = "${local.marker_ttl_days}d"
      IDEMQ_NAMESPACE      = coalesce(var.namespace, var.queue_name)
      IDEMQ_LEGACY_MARKERS = var.legacy_markers
      IDEMQ_CONCURRENCY    = tostring(var.job_concurrency)
      IDEMQ_BACKOFF_CAP    = "${var.backoff_cap_seconds}s"
      IDEMQ_ENVELOPE       = var.envelope
      IDEMQ_JOB_ID_POINTER = var.job_id_pointer
    })
  }

  # The role's policies must exist before the first invocation.
  depends_on = [aws_iam_role_policy.function, aws_iam_role_policy.function_kms, aws_iam_role_policy.extra, aws_iam_role_policy_attachment.extra]

  lifecycle {
    precondition {
      condition     = (var.package_path == null ? 0 : 1) + (var.s3_bucket == null && var.s3_key == null ? 0 : 1) + (var.image_uri == null ? 0 : 1) == 1 && (var.s3_bucket == null) == (var.s3_key == null)
      error_message = "The function's code: set exactly one of package_path, s3_bucket + s3_key (both), or image_uri."
    }
  }
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
