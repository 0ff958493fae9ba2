# The ledger example (examples/ledger.rs) deployed with the idemq module.
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

  name            = "idemq-ledger"
  queue_name      = "idemq-ledger"
  table_name      = "idemq-ledger"
  package_path    = "${path.module}/../../../../target/lambda/ledger/bootstrap.zip"
  alarm_topic_arn = var.alarm_topic_arn

  # The defaults, spelled out: what the runbook's sizing section talks about.
  function_timeout        = 30
  batch_size              = 10
  maximum_batching_window = 1
  maximum_concurrency     = 10
  max_receive_count       = 6
  source_retention_days   = 4
}

output "queue_url" {
  value = module.ledger.queue_url
}

output "dead_letter_queue_url" {
  value = module.ledger.dead_letter_queue_url
}

output "table_name" {
  value = module.ledger.table_name
}

output "function_name" {
  value = module.ledger.function_name
}

output "dashboard_name" {
  value = module.ledger.dashboard_name
}
