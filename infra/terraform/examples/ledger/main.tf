# The ledger example (examples/ledger.rs) deployed with the idemq module, as
# your own root module would use it (copy modules/idemq verbatim).
#
#   cargo lambda build --release --arm64 --example ledger --output-format zip
#   cd infra/terraform/examples/ledger
#   terraform init && terraform apply -var alarm_topic_arn=arn:aws:sns:...
#
# The zip lands in target/lambda/ledger/bootstrap.zip (cargo lambda names the
# directory after the example).

terraform {
  required_version = ">= 1.5.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.30.0, < 6.0.0"
    }
  }
}

provider "aws" {
  region = var.region
}

variable "region" {
  type    = string
  default = "us-east-1"
}

variable "alarm_topic_arn" {
  description = "SNS topic for the alarms (empty: alarms without actions)."
  type        = string
  default     = ""
}

module "ledger" {
  source = "../../modules/idemq"

  name         = "idemq-ledger"
  queue_name   = "idemq-ledger"
  table_name   = "idemq-ledger"
  package_path = "${path.module}/../../../../target/lambda/ledger/bootstrap.zip"

  alarm_actions = var.alarm_topic_arn == "" ? [] : [var.alarm_topic_arn]
  ok_actions    = var.alarm_topic_arn == "" ? [] : [var.alarm_topic_arn]

  # The ledger's effects write only the idemq table. A handler that writes
  # its own tables or sends follow-ups names them, and its own variables:
  #   effect_table_arns    = [aws_dynamodb_table.orders.arn]
  #   follow_up_queue_arns = [aws_sqs_queue.shipping.arn]
  #   environment          = { ORDERS_TABLE = aws_dynamodb_table.orders.name }

  # The defaults, spelled out: what the runbook's sizing section talks about.
  function_timeout        = 30
  batch_size              = 10
  maximum_batching_window = 1
  maximum_concurrency     = 10
  max_receive_count       = 6
  source_retention_days   = 4
}

output "queue_url" {
  description = "Where producers send jobs (idemq send, Producer)."
  value       = module.ledger.queue_url
}

output "dead_letter_queue_url" {
  description = "The DLQ (idemq dlq)."
  value       = module.ledger.dead_letter_queue_url
}

output "table_name" {
  description = "The idemq table."
  value       = module.ledger.table_name
}

output "function_name" {
  description = "The ledger function."
  value       = module.ledger.function_name
}

output "dashboard_name" {
  description = "The CloudWatch dashboard."
  value       = module.ledger.dashboard_name
}
