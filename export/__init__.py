"""Exporters: SavedModels for TensorFlow Serving and TF-Hub modules."""
