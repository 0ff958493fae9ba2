terraform {
  required_version = ">= 1.5.0"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # 5.x: scaling_config on event source mappings, logging_config on
      # functions, aws_sqs_queue_redrive_allow_policy, aws_region.name.
      version = ">= 5.30.0, < 6.0.0"
    }
  }
}
