output "queue_url" {
  value = aws_sqs_queue.source.id
}

output "queue_arn" {
  value = aws_sqs_queue.source.arn
}

output "dead_letter_queue_url" {
  value = aws_sqs_queue.dlq.id
}

output "table_name" {
  value = aws_dynamodb_table.idemq.name
}

output "function_name" {
  value = aws_lambda_function.this.function_name
}

output "function_role_name" {
  value = aws_iam_role.function.name
}

output "dashboard_name" {
  value = aws_cloudwatch_dashboard.this.dashboard_name
}

output "operator_policy_arn" {
  value = var.create_operator_policy ? aws_iam_policy.operator[0].arn : null
}

output "bootstrap_policy_arn" {
  value = var.create_bootstrap_policy ? aws_iam_policy.bootstrap[0].arn : null
}

output "deployment_error_alarm_name" {
  description = "The alarm that fires on the first job failed by the deployment (JobsMisconfigured >= 1)."
  value       = aws_cloudwatch_metric_alarm.deployment_errors.alarm_name
}
