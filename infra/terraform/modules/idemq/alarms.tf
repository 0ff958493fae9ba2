# Alarms on what matters, and a dashboard with the same series. idemq's own
# metrics come from EMF log lines: namespace idemq, dimension Queue = the
# source queue's name (src/metrics.rs, QueueInfo.name). Runbook for each
# alarm: docs/operations.md.

data "aws_region" "current" {}

locals {
  queue_dimension = { (local.metrics_queue_label) = aws_sqs_queue.source.name }
}

resource "aws_cloudwatch_metric_alarm" "dead_letter_rate" {
  alarm_name          = "${var.name}-dead-letter-rate"
  alarm_description   = "Share of jobs given up on (JobsDeadLettered / jobs received). Runbook: docs/operations.md#dead-letter-rate"
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.dead_letter_rate_threshold_percent
  evaluation_periods  = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.ok_actions

  metric_query {
    id          = "rate"
    label       = "dead-lettered %"
    expression  = "IF(jobs > 0, 100 * dead / jobs, 0)"
    return_data = true
  }

  metric_query {
    id = "dead"
    metric {
      namespace   = local.metrics_namespace
      metric_name = "JobsDeadLettered"
      dimensions  = local.queue_dimension
      period      = 300
      stat        = "Sum"
    }
  }

  metric_query {
    id = "jobs"
    metric {
      namespace   = local.metrics_namespace
      metric_name = "BatchSize"
      dimensions  = local.queue_dimension
      period      = 300
      stat        = "Sum"
    }
  }
}

resource "aws_cloudwatch_metric_alarm" "retry_rate" {
  alarm_name          = "${var.name}-retry-rate"
  alarm_description   = "Share of jobs handed back to SQS to retry (JobsRetried / jobs received). Runbook: docs/operations.md#retry-rate"
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.retry_rate_threshold_percent
  evaluation_periods  = 3
  datapoints_to_alarm = 3
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.ok_actions

  metric_query {
    id          = "rate"
    label       = "retried %"
    expression  = "IF(jobs > 0, 100 * retried / jobs, 0)"
    return_data = true
  }

  metric_query {
    id = "retried"
    metric {
      namespace   = local.metrics_namespace
      metric_name = "JobsRetried"
      dimensions  = local.queue_dimension
      period      = 300
      stat        = "Sum"
    }
  }

  metric_query {
    id = "jobs"
    metric {
      namespace   = local.metrics_namespace
      metric_name = "BatchSize"
      dimensions  = local.queue_dimension
      period      = 300
      stat        = "Sum"
    }
  }
}

resource "aws_cloudwatch_metric_alarm" "payload_conflicts" {
  alarm_name          = "${var.name}-payload-conflicts"
  alarm_description   = "A job id came back with a different payload (JobsConflict > 0). Runbook: docs/operations.md#payload-conflicts"
  namespace           = local.metrics_namespace
  metric_name         = "JobsConflict"
  dimensions          = local.queue_dimension
  statistic           = "Sum"
  period              = 60
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.ok_actions
}

# One job failed by the deployment (a permission the role lacks on a table
# the commit writes, or a missing table) means every job fails alike until a
# deploy: alarm on the first, not on a rate.
resource "aws_cloudwatch_metric_alarm" "deployment_errors" {
  alarm_name          = "${var.name}-deployment-errors"
  alarm_description   = "A job failed because of the deployment: the role lacks a permission on a table the commit writes, or the table does not exist (JobsMisconfigured >= 1). Runbook: docs/operations.md#deployment-errors"
  namespace           = local.metrics_namespace
  metric_name         = "JobsMisconfigured"
  dimensions          = local.queue_dimension
  statistic           = "Sum"
  period              = 60
  evaluation_periods  = 1
  threshold           = 1
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.ok_actions
}

# Visible + in flight: `idemq dlq list/show/stats` read dead letters by
# receiving them, which makes them in flight (not visible) until their
# visibility is released; an alarm on ApproximateNumberOfMessagesVisible
# alone would turn OK while an operator reads a DLQ that is still full.
# ApproximateNumberOfMessagesNotVisible counts "messages that are in flight
# ... received by a consumer but not yet deleted or expired"
# ("Available CloudWatch metrics for Amazon SQS",
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-available-cloudwatch-metrics.html).
resource "aws_cloudwatch_metric_alarm" "dlq_not_empty" {
  alarm_name          = "${var.name}-dlq-not-empty"
  alarm_description   = "Messages wait in the DLQ, visible or being read. Runbook: docs/operations.md#dlq-not-empty"
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  evaluation_periods  = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.ok_actions

  metric_query {
    id          = "letters"
    label       = "dead letters (visible + in flight)"
    expression  = "visible + inflight"
    return_data = true
  }

  metric_query {
    id = "visible"
    metric {
      namespace   = "AWS/SQS"
      metric_name = "ApproximateNumberOfMessagesVisible"
      dimensions  = { QueueName = aws_sqs_queue.dlq.name }
      period      = 60
      stat        = "Maximum"
    }
  }

  metric_query {
    id = "inflight"
    metric {
      namespace   = "AWS/SQS"
      metric_name = "ApproximateNumberOfMessagesNotVisible"
      dimensions  = { QueueName = aws_sqs_queue.dlq.name }
      period      = 60
      stat        = "Maximum"
    }
  }
}

resource "aws_cloudwatch_metric_alarm" "oldest_message_age" {
  alarm_name          = "${var.name}-oldest-message-age"
  alarm_description   = "The source queue is falling behind. Runbook: docs/operations.md#oldest-message-age"
  namespace           = "AWS/SQS"
  metric_name         = "ApproximateAgeOfOldestMessage"
  dimensions          = { QueueName = aws_sqs_queue.source.name }
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 5
  datapoints_to_alarm = 5
  threshold           = var.oldest_message_age_threshold
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.ok_actions
}

resource "aws_cloudwatch_metric_alarm" "function_errors" {
  alarm_name          = "${var.name}-function-errors"
  alarm_description   = "Whole invocations failed (a job's failure is not a function error under idemq). Runbook: docs/operations.md#function-errors"
  namespace           = "AWS/Lambda"
  metric_name         = "Errors"
  dimensions          = { FunctionName = aws_lambda_function.this.function_name }
  statistic           = "Sum"
  period              = 60
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.ok_actions
}

resource "aws_cloudwatch_metric_alarm" "function_throttles" {
  alarm_name          = "${var.name}-function-throttles"
  alarm_description   = "Invocations were throttled. Runbook: docs/operations.md#function-throttles"
  namespace           = "AWS/Lambda"
  metric_name         = "Throttles"
  dimensions          = { FunctionName = aws_lambda_function.this.function_name }
  statistic           = "Sum"
  period              = 60
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.ok_actions
}

resource "aws_cloudwatch_dashboard" "this" {
  dashboard_name = "${var.name}-idemq"
  dashboard_body = jsonencode({
    widgets = [
      {
        type = "metric", x = 0, y = 0, width = 12, height = 6
        properties = {
          title = "Jobs by outcome", region = data.aws_region.current.name
          stat  = "Sum", period = 60, view = "timeSeries", stacked = true
          metrics = [
            [local.metrics_namespace, "JobsSucceeded", local.metrics_queue_label, aws_sqs_queue.source.name],
            [local.metrics_namespace, "JobsDuplicate", local.metrics_queue_label, aws_sqs_queue.source.name],
            [local.metrics_namespace, "JobsRetried", local.metrics_queue_label, aws_sqs_queue.source.name],
            [local.metrics_namespace, "JobsDeadLettered", local.metrics_queue_label, aws_sqs_queue.source.name],
            [local.metrics_namespace, "JobsConflict", local.metrics_queue_label, aws_sqs_queue.source.name],
            [local.metrics_namespace, "JobsMisconfigured", local.metrics_queue_label, aws_sqs_queue.source.name],
          ]
        }
      },
      {
        type = "metric", x = 12, y = 0, width = 12, height = 6
        properties = {
          title  = "Dead-letter and retry rate (%)", region = data.aws_region.current.name
          period = 300, view = "timeSeries"
          metrics = [
            [{ expression = "IF(jobs > 0, 100 * dead / jobs, 0)", label = "dead-lettered %", id = "deadrate" }],
            [{ expression = "IF(jobs > 0, 100 * retried / jobs, 0)", label = "retried %", id = "retryrate" }],
            [local.metrics_namespace, "JobsDeadLettered", local.metrics_queue_label, aws_sqs_queue.source.name, { id = "dead", stat = "Sum", visible = false }],
            [local.metrics_namespace, "JobsRetried", local.metrics_queue_label, aws_sqs_queue.source.name, { id = "retried", stat = "Sum", visible = false }],
            [local.metrics_namespace, "BatchSize", local.metrics_queue_label, aws_sqs_queue.source.name, { id = "jobs", stat = "Sum", visible = false }],
          ]
        }
      },
      {
        type = "metric", x = 0, y = 6, width = 12, height = 6
        properties = {
          title  = "Job duration (ms)", region = data.aws_region.current.name
          period = 60, view = "timeSeries"
          metrics = [
            [local.metrics_namespace, "JobDuration", local.metrics_queue_label, aws_sqs_queue.source.name, { stat = "p50" }],
            [local.metrics_namespace, "JobDuration", local.metrics_queue_label, aws_sqs_queue.source.name, { stat = "p99" }],
          ]
        }
      },
      {
        type = "metric", x = 12, y = 6, width = 12, height = 6
        properties = {
          title = "Queues", region = data.aws_region.current.name
          stat  = "Maximum", period = 60, view = "timeSeries"
          metrics = [
            ["AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName", aws_sqs_queue.source.name],
            ["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", aws_sqs_queue.source.name, { yAxis = "right" }],
            ["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", aws_sqs_queue.dlq.name, { yAxis = "right" }],
            ["AWS/SQS", "ApproximateNumberOfMessagesNotVisible", "QueueName", aws_sqs_queue.dlq.name, { yAxis = "right" }],
          ]
        }
      },
      {
        type = "metric", x = 0, y = 12, width = 24, height = 6
        properties = {
          title  = "Function", region = data.aws_region.current.name
          period = 60, view = "timeSeries"
          metrics = [
            ["AWS/Lambda", "Errors", "FunctionName", aws_lambda_function.this.function_name, { stat = "Sum" }],
            ["AWS/Lambda", "Throttles", "FunctionName", aws_lambda_function.this.function_name, { stat = "Sum" }],
            ["AWS/Lambda", "ConcurrentExecutions", "FunctionName", aws_lambda_function.this.function_name, { stat = "Maximum" }],
            ["AWS/Lambda", "Duration", "FunctionName", aws_lambda_function.this.function_name, { stat = "p99", yAxis = "right" }],
          ]
        }
      },
    ]
  })
}
