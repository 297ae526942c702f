"""A run on disk: its directory (lock, resume fingerprint, config history), checkpoint records,
the best checkpoint, metrics rows, and the data files it reads (with their record cache)."""
