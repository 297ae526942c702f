"""Supervised fine-tuning: settings, stages and the workflow (`supervised_workflow`)."""
