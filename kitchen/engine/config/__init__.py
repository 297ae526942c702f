"""Config: loading recipe defaults < YAML < key=value into a validated, sectioned model; the keys
every run shares (run, checkpoint, logging and evaluation sections); the renames of old flat keys."""
