"""Programs the docs run: the rule-labelled tasks that docs/classification.md,
sentence-embeddings.md, ner.md and squad.md fine-tune on, made from the shared
corpus."""
