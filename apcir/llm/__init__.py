"""The LLM stage: one call per turn for the personalisation level and three reformulations."""
