output "queue_url" {
  description = "The source queue's URL, where producers send jobs (idemq send, Producer)."
  value       = aws_sqs_queue.source.id
}

output "queue_arn" {
  description = "The source queue's ARN."
  value       = aws_sqs_queue.source.arn
}

output "dead_letter_queue_url" {
  description = "The DLQ's URL (idemq dlq)."
  value       = aws_sqs_queue.dlq.id
}

output "dead_letter_queue_arn" {
  description = "The DLQ's ARN."
  value       = aws_sqs_queue.dlq.arn
}

output "table_name" {
  description = "The idemq table (IDEMQ_TABLE)."
  value       = aws_dynamodb_table.idemq.name
}

output "table_arn" {
  description = "The idemq table's ARN."
  value       = aws_dynamodb_table.idemq.arn
}

output "function_name" {
  description = "The function's name."
  value       = aws_lambda_function.this.function_name
}

output "function_arn" {
  description = "The function's ARN."
  value       = aws_lambda_function.this.arn
}

output "function_role_name" {
  description = "The function's execution role (to attach more policies; the role's Deny statements still keep idemq's table and queues to what idemq calls)."
  value       = aws_iam_role.function.name
}

output "function_role_arn" {
  description = "The function's execution role's ARN."
  value       = aws_iam_role.function.arn
}

output "log_group_name" {
  description = "The function's log group (JSON lines and idemq's EMF metrics)."
  value       = aws_cloudwatch_log_group.function.name
}

output "dashboard_name" {
  description = "The CloudWatch dashboard showing every alarmed series."
  value       = aws_cloudwatch_dashboard.this.dashboard_name
}

output "operator_policy_arn" {
  description = "What idemq send and idemq dlq call on these resources (create_operator_policy = true), else null; attach it to your operators' role."
  value       = var.create_operator_policy ? aws_iam_policy.operator[0].arn : null
}

output "bootstrap_policy_arn" {
  description = "What idemq init calls on these resources (create_bootstrap_policy = true), else null."
  value       = var.create_bootstrap_policy ? aws_iam_policy.bootstrap[0].arn : null
}

output "deployment_error_alarm_name" {
  description = "The alarm that fires on the first job failed by the deployment (JobsMisconfigured >= 1)."
  value       = aws_cloudwatch_metric_alarm.deployment_errors.alarm_name
}

output "dead_letter_queue_alarm_name" {
  description = "The alarm that fires while dead letters wait in the DLQ (visible or being read)."
  value       = aws_cloudwatch_metric_alarm.dlq_not_empty.alarm_name
}
