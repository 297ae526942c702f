"""The engine: stages, workflows and the runner that executes them over a context; config loading,
run directories, checkpoints, metrics, logging and traces; the ports and the plugin registries. It
knows no training family: families build workflows on it, apps run them."""
