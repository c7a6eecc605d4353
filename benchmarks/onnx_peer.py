"""ONNX Runtime's peer model: a Hugging Face BERT written by torch.onnx.export.

Shared by the benchmarks that time ONNX Runtime (serving_benchmark,
distillation_benchmark): the model's keyword forward wrapped for the
exporter's positional inputs, the batch and length axes dynamic.
"""

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


def export(model, example, path, outputs):
  """Writes the transformers `model` (in eval mode) to the ONNX file `path`.

  Args:
    model: a transformers BERT model, called with the three INPUT_NAMES as
      keywords.
    example: its tokenizer's "pt" tensors of one text (the trace's inputs).
    path: the .onnx file to write.
    outputs: {output name: (fn(the model's output) -> Tensor, its dynamic
      axes, e.g. {0: "batch"})}, in the session's output order.
  """
  import torch  # pylint: disable=g-import-not-at-top

  class Positional(torch.nn.Module):  # the model's forward takes keywords

    def __init__(self):
      super().__init__()
      self.bert = model

    def forward(self, input_ids, attention_mask, token_type_ids):
      found = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                        token_type_ids=token_type_ids)
      return tuple(fn(found) for fn, _ in outputs.values())

  axes = {name: {0: "batch", 1: "length"} for name in INPUT_NAMES}
  axes.update({name: dims for name, (_, dims) in outputs.items()})
  torch.onnx.export(
      Positional().eval(), tuple(example[name] for name in INPUT_NAMES), path,
      input_names=list(INPUT_NAMES), output_names=list(outputs),
      dynamic_axes=axes, dynamo=False, opset_version=17)
