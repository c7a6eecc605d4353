"""Programs that write the rule-labelled tasks the docs fine-tune on (from the shared corpus)."""
