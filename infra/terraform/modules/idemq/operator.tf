# Optional: what the `idemq` CLI calls on this deployment's resources, to
# attach to the roles that run it. tests/infra derives both action lists from
# the code reachable from cli/src/main.rs: `idemq init` for the bootstrap
# policy, every other subcommand for the operator policy.
data "aws_iam_policy_document" "operator" {
  # send (and dlq redrive/import, and the native redrive's move task) send
  # jobs to the source queue. Nothing here can change a queue's attributes
  # or policy.
  statement {
    sid = "SourceQueue"
    actions = [
      "sqs:GetQueueUrl",
      "sqs:GetQueueAttributes",
      "sqs:SendMessage",
    ]
    resources = [aws_sqs_queue.source.arn]
  }

  # dlq list/show/stats peek (receive, then release the visibility), export
  # --delete and redrive delete, import may restore into it, and SQS's own
  # move task (StartMessageMoveTask) is driven from here.
  statement {
    sid = "DeadLetterQueue"
    actions = [
      "sqs:GetQueueUrl",
      "sqs:GetQueueAttributes",
      "sqs:SendMessage",
      "sqs:ReceiveMessage",
      "sqs:ChangeMessageVisibility",
      "sqs:DeleteMessage",
      "sqs:ListDeadLetterSourceQueues",
      "sqs:StartMessageMoveTask",
      "sqs:ListMessageMoveTasks",
      "sqs:CancelMessageMoveTask",
    ]
    resources = [aws_sqs_queue.dlq.arn]
  }

  # dlq reads the failure records, and only them: every key a read names
  # must carry idemq's reserved prefix, so the ledger's own items (which may
  # hold payload data) stay out of reach.
  # https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/specifying-conditions.html
  statement {
    sid = "FailureRecords"
    actions = [
      "dynamodb:GetItem",
      "dynamodb:BatchGetItem",
    ]
    resources = [aws_dynamodb_table.idemq.arn]
    condition {
      test     = "ForAllValues:StringLike"
      variable = "dynamodb:LeadingKeys"
      values   = ["${local.key_prefix}*"]
    }
  }

  # dlq --function: the consumer's settings from the function's
  # configuration (a version or alias too: NAME:*), and its DLQ through its
  # SQS event source. ListEventSourceMappings takes no resource, so "*":
  # https://docs.aws.amazon.com/service-authorization/latest/reference/list_awslambda.html
  statement {
    sid       = "ConsumerFunction"
    actions   = ["lambda:GetFunctionConfiguration"]
    resources = [aws_lambda_function.this.arn, "${aws_lambda_function.this.arn}:*"]
  }

  statement {
    sid       = "EventSourceMappings"
    actions   = ["lambda:ListEventSourceMappings"]
    resources = ["*"]
  }

  # idemq console: the consumer's retries (the idemq namespace) and the
  # source queue's oldest message (AWS/SQS). GetMetricData takes no
  # resource, so "*"; it reads metrics only:
  # https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazoncloudwatch.html
  statement {
    sid       = "ConsumerMetrics"
    actions   = ["cloudwatch:GetMetricData"]
    resources = ["*"]
  }
}

# With a customer managed key: send and receive on the queues encrypted with
# it, read the failure records.
data "aws_iam_policy_document" "operator_kms" {
  source_policy_documents = [data.aws_iam_policy_document.operator.json]

  statement {
    sid       = "KmsKey"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [local.kms_key]
  }
}

resource "aws_iam_policy" "operator" {
  count       = var.create_operator_policy ? 1 : 0
  name        = "${var.name}-operator"
  description = "idemq CLI (send, dlq) on this deployment's queue, DLQ and failure records"
  policy      = local.kms_key == "" ? data.aws_iam_policy_document.operator.json : data.aws_iam_policy_document.operator_kms.json
}

# `idemq init` only: creates (or verifies) the queues and the table. Not
# needed when this module created them; kept apart from the operator policy
# because SetQueueAttributes can rewrite a queue's policy.
data "aws_iam_policy_document" "bootstrap" {
  statement {
    sid = "SourceQueue"
    actions = [
      "sqs:CreateQueue",
      "sqs:GetQueueUrl",
      "sqs:GetQueueAttributes",
    ]
    resources = [aws_sqs_queue.source.arn]
  }

  # SetQueueAttributes: the DLQ's RedriveAllowPolicy.
  statement {
    sid = "DeadLetterQueue"
    actions = [
      "sqs:CreateQueue",
      "sqs:GetQueueUrl",
      "sqs:GetQueueAttributes",
      "sqs:SetQueueAttributes",
    ]
    resources = [aws_sqs_queue.dlq.arn]
  }

  statement {
    sid = "Table"
    actions = [
      "dynamodb:CreateTable",
      "dynamodb:DescribeTable",
      "dynamodb:DescribeTimeToLive",
      "dynamodb:UpdateTimeToLive",
      "dynamodb:DescribeContinuousBackups",
      "dynamodb:UpdateContinuousBackups",
    ]
    resources = [aws_dynamodb_table.idemq.arn]
  }
}

resource "aws_iam_policy" "bootstrap" {
  count       = var.create_bootstrap_policy ? 1 : 0
  name        = "${var.name}-bootstrap"
  description = "idemq init on this deployment's queue, DLQ and table"
  policy      = data.aws_iam_policy_document.bootstrap.json
}
