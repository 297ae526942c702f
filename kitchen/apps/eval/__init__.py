"""`kitchen eval`: evaluate a checkpoint, run or base model on named tasks, kitchen's own or
lm-evaluation-harness's, and write results with standard errors."""
