"""Training from recorded experience (AEPO, GRPO with verifiable rewards). Not built yet: see the issues."""
