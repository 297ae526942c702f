"""The shipped recipes: short config blueprints that select a family's workflow, with their
environments, agents, reward functions, eval tasks, data and ready-made YAML configs."""
