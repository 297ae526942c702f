"""Distillation: on-policy (the RL workflow with a teacher-KL adjuster) and prompt distillation
(the supervised workflow on a teacher's answers)."""
