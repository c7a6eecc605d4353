"""benchmarks/jax_gpu_step.py end to end on JAX's CPU device, tiny: the one
script the GPU run uses (packed rows with our records' lengths, fused
attention, bfloat16 steps, MFU over real tokens, results written as they
are measured) runs here first, as a real process (JAX, no TensorFlow)."""

import json
import os

import pytest

from tests import testing

LENGTHS = os.path.join(testing.ROOT, "benchmarks", "data",
                       "record_lengths.json")


@pytest.mark.slow
def test_the_gpu_script_runs_packed_and_fused_on_the_cpu(tmp_path):
  with open(LENGTHS) as f:
    histogram = json.load(f)
  assert set(histogram) == {"128", "512"}
  assert max(int(k) for k in histogram["512"]) <= 512
  out = tmp_path / "out"
  proc = testing.run_cli(
      ["-m", "benchmarks.jax_gpu_step", "--config=tiny", "--batch_size=4",
       "--seq_length=128", "--predictions=8", "--steps=1",
       "--memorise_steps=2", f"--lengths={LENGTHS}", "--pack",
       "--fused_attention", f"--out_dir={out}"],
      env={"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu",
           # Compiles in half the time; a test of the script, not speed.
           "XLA_FLAGS": "--xla_backend_optimization_level=0 "
                        "--xla_llvm_disable_expensive_passes=true"},
      timeout=600)
  with open(out / "result.json") as f:
    result = json.load(f)
  assert result["backend"] == "jax" and result["platform"] == "cpu"
  assert result["fp32_check"].startswith("skipped")
  assert result["pack"] and result["fused_attention"]
  # Packed rows of our lengths, each with at least one sequence.
  assert result["sequences_per_row"] >= 1
  assert 0 < result["real_token_share"] <= 1
  assert result["real_token_tflops_per_step"] <= result[
      "model_tflops_per_step"] * 1.01
  assert all(x == x for x in result["bf16_last_losses"])  # finite
  # Both forwards compiled, the fused op is the dense formula on the CPU
  # (0.0 here); a fused path that drops the attention mask is 5e-3 off. On
  # a GPU's flash kernel bfloat16 keeps ~3 significant digits: the script
  # reports the figure there.
  assert result["fused_vs_dense_bf16_max_rel_diff"] < 2e-3
  assert isinstance(result["custom_calls"], list)
  assert json.loads(proc.stdout.strip().splitlines()[-1]) == result
