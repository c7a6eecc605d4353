"""The variables a serving export saves, laid out for inference.

At inference `FeedForward` runs a feed-forward network of >= 3072 columns in
column blocks (`kernels.inference_column_blocks`). Sliced from the [H, I]
`intermediate` kernel, every block is a copy on every request (measured by
`benchmarks/serving_benchmark.py`; docs/performance.md). A serving export
therefore saves that kernel as its k blocks [H, I/k]: the same values and
bytes. Its functions read the kernel back as the reshaped stack of the
blocks, of which TensorFlow's graph optimizer folds `kernels.feed_forward`'s
slices to the blocks themselves, so no copy is made.

Every other weight is saved as it is (see `tfhub_modules.tf_variables`). The
TF-Hub modules keep the model's own variables: they are fine-tuned.

Example:
  weights = ServingWeights(encoder)
  module.variables = weights.variables       # what the SavedModel saves
  with weights.scope():                      # inside each traced function
    outputs = encoder(inputs, training=False)
"""

import keras
import tensorflow as tf

from export import tfhub_modules
from official_bert.modeling import feed_forward


class ServingWeights:
  """The tf.Variables of Keras layers for a serving export.

  Args:
    *layers: the Keras layers (models) the export calls; other callables are
      skipped for the blocks, their variables (if any) kept as they are.

  Attributes:
    variables: the list to track on the exported object: each layer's
      tf.Variables once, except the blocked kernels, replaced by their
      blocks.
    blocked: `[(kernel, blocks)]`, a Keras variable [H, I] and its list of k
      tf.Variables [H, I/k].
  """

  def __init__(self, *layers):
    everything, _ = tfhub_modules.tf_variables(*layers)
    self.blocked = []
    for layer in layers:
      flatten = getattr(layer, "_flatten_layers", None)
      for sublayer in flatten() if flatten else ():
        if not isinstance(sublayer, feed_forward.FeedForward):
          continue
        count = sublayer.inference_column_blocks()
        if count > 1:
          kernel = sublayer.intermediate.kernel
          name = kernel.path.replace("/", "_")
          blocks = [tf.Variable(block, trainable=False,
                                name=f"{name}_block_{j}")
                    for j, block in enumerate(tf.split(
                        tf.convert_to_tensor(kernel.value), count, axis=1))]
          self.blocked.append((kernel, blocks))
    replaced = {id(kernel.value) for kernel, _ in self.blocked}
    self.variables = [v for v in everything if id(v) not in replaced] + [
        block for _, blocks in self.blocked for block in blocks]

  def scope(self):
    """A scope in which the layers read each blocked kernel from its blocks.

    Enter it inside the traced function (the reads become part of it).
    """
    return keras.StatelessScope(state_mapping=[
        (kernel, tf.reshape(tf.stack(blocks, axis=1), kernel.shape))
        for kernel, blocks in self.blocked])
