"""Example reward functions (`examples`), registered by name in the `kitchen.rewards` entry-point
group or named by path (`recipes.rewards.examples:keyword_reward`); resolving and calling reward
functions is the RL family's (`kitchen.families.rl.rewards`)."""
