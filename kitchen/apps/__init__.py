"""What users run around training: the `kitchen` CLI, `kitchen serve` (the Tinker and OpenAI APIs),
`kitchen eval` and its harness, `kitchen report`, and sampling, chat and export of checkpoints."""
