"""official_bert: BERT as a TensorFlow / Keras 3 model garden."""
