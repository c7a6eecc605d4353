"""Programs the docs run: the rule-labelled tasks fine-tuned on in
docs/fine-tuning.md, made from the shared corpus."""
