"""Watching a run: structured logs, OpenTelemetry traces, and metric sinks (TensorBoard, W&B, MLflow)."""
