"""What the training families share: the optimizer, renderer and data settings sections, setup
stages (backend, tokenizer, renderer, training client), the optimizer step and its guards,
checkpoint stages, the train loop, and request helpers over the ports."""
