"""Offline data jobs that write BERT pretraining TFRecords."""
