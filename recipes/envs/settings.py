"""What the problem environments (arithmetic, GSM8K) share in their settings."""

from __future__ import annotations

from pydantic import Field

from kitchen.families.rl import EnvSettings


class ProblemSettings(EnvSettings):
    format_coef: float = Field(0.0, ge=0, description="reward penalty for a reply with no final answer")
