# Optional: what the `idemq` CLI calls on this deployment's resources
# (`idemq init`, `idemq send`, `idemq dlq`), to attach to the operators' role.
# tests/infra derives the action list from the code reachable from
# src/bin/idemq.
data "aws_iam_policy_document" "operator" {
  # init creates/verifies both queues; send (and dlq redrive/import) send
  # jobs to the source queue.
  statement {
    sid = "SourceQueue"
    actions = [
      "sqs:CreateQueue",
      "sqs:GetQueueUrl",
      "sqs:GetQueueAttributes",
      "sqs:SetQueueAttributes",
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
      "sqs:CreateQueue",
      "sqs:GetQueueUrl",
      "sqs:GetQueueAttributes",
      "sqs:SetQueueAttributes",
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

  # init creates/verifies the table; dlq reads the failure records.
  statement {
    sid = "Table"
    actions = [
      "dynamodb:CreateTable",
      "dynamodb:DescribeTable",
      "dynamodb:DescribeTimeToLive",
      "dynamodb:UpdateTimeToLive",
      "dynamodb:GetItem",
      "dynamodb:BatchGetItem",
      "dynamodb:Scan",
    ]
    resources = [aws_dynamodb_table.idemq.arn]
  }
}

resource "aws_iam_policy" "operator" {
  count       = var.create_operator_policy ? 1 : 0
  name        = "${var.name}-operator"
  description = "idemq CLI (init, send, dlq) on this deployment's queue, DLQ and table"
  policy      = data.aws_iam_policy_document.operator.json
}
