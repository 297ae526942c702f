"""The backends behind kitchen's ports: local (torch + transformers, CPU or GPU, FSDP2 on Ray, vLLM),
noop (a seeded fake for integration tests) and tinker (the official SDK), each registering itself
under the `kitchen.backends` entry-point group; `common` is what local and noop share."""
