"""The training families: supervised, preference, RL and distillation, each its settings sections,
stages grouped by phase and workflow builders, over the stages they share (`common`) and evaluation
during training (`evaluation`). The math is train_core's; the engine runs the workflows."""
