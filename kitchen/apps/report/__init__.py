"""Run reports: a self-contained HTML page per run directory (`kitchen report`) and a one-line
summary per run (`kitchen runs`)."""
