# {{name}} deployed with idemq's Terraform module (modules/idemq, copied
# verbatim from idemq).
#
#   cargo lambda build --release --arm64 --output-format zip
#   cd deploy/terraform && terraform init && terraform apply
#
# cargo lambda writes the zip to target/lambda/{{name}}/bootstrap.zip.

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
  description = "SNS topic for alarm and OK notifications (empty: alarms without actions)."
  type        = string
  default     = ""
}

# The function's own data: orders and each customer's running total.
resource "aws_dynamodb_table" "orders" {
  name         = "{{name}}-orders"
  billing_mode = "PAY_PER_REQUEST"
  hash_key     = "pk"

  attribute {
    name = "pk"
    type = "S"
  }

  point_in_time_recovery {
    enabled = true
  }

  server_side_encryption {
    enabled = true
  }
}

module "idemq" {
  source = "./modules/idemq"

  name         = "{{name}}"
  queue_name   = "{{name}}"
  table_name   = "{{name}}-idemq"
  package_path = "${path.module}/../../target/lambda/{{name}}/bootstrap.zip"

  # The handler writes its own table, named by a variable of its own.
  effect_table_arns = [aws_dynamodb_table.orders.arn]
  environment       = { ORDERS_TABLE = aws_dynamodb_table.orders.name }

  alarm_actions = var.alarm_topic_arn == "" ? [] : [var.alarm_topic_arn]
  ok_actions    = var.alarm_topic_arn == "" ? [] : [var.alarm_topic_arn]
}

output "queue_url" {
  description = "Where producers send orders (idemq send --job-id-pointer /order_id, Producer)."
  value       = module.idemq.queue_url
}

output "dead_letter_queue_url" {
  description = "The DLQ (idemq dlq)."
  value       = module.idemq.dead_letter_queue_url
}

output "idemq_table_name" {
  description = "idemq's table (failure records; idemq dlq --table)."
  value       = module.idemq.table_name
}

output "orders_table_name" {
  description = "The function's own table."
  value       = aws_dynamodb_table.orders.name
}

output "function_name" {
  description = "The function."
  value       = module.idemq.function_name
}
