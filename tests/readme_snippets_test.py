"""Runs every ```sh and ```python block of README.md and docs/*.md as written.

Each block is found by its file and its first line (`BLOCKS`); a page having
a block this file does not know, or losing one it knows, fails
`test_every_block_is_known`. A block's text is read from its page at
run time, so editing a snippet changes what runs. The only changes made to it
are the substitutions in `SUBSTITUTIONS` (placeholder paths -> tiny real
fixtures built here, /tmp outputs -> pytest's tmp dir, training shortened),
each with its reason, and each must still match a page (an unused one is
an error). ```sh blocks run with bash from the repository root, `python` being
this interpreter, so `python -m ...` commands are real subprocesses; the
```python blocks run in one fresh subprocess (one TensorFlow start-up), each in
its own namespace after its prelude in `PRELUDES`, which defines its free
variables, and before its `CHECKS`. Commands that cannot run here are
listed in `NOT_RUN`, whole ```sh blocks in `NOT_RUN_BLOCKS`, each with the
reason and the test that checks it instead as far as it can be: the `curl`
request's body is fed to the exported `serving_default`; the README's
commands and the quickstart's `--export_huggingface` are the commands
`.ci/run` and tests/quickstart_test.py run; the Dask recipe's scheduler,
worker and pipeline command lines are the ones
tests/create_pretraining_data_beam_dask_test.py runs (both parsed); the
Dataflow and Flink/Spark blocks use only flags the program defines and
options Beam defines. The blocks in `FLAGS_CHECKED_BLOCKS` repeat a run that
another test makes (named there): their commands are parsed by the programs'
own flag definitions, not run. Every other ```sh block runs, its `python -m`
commands in this process (testing.run_program). Output blocks are
compared with what their command prints (the export line: but for its
BERT-Base figures, the tensor count checked against the code; the Dask
summary line: rendered by the program's own format strings, its counts
from the job on the lines the page names).

The model: `testing.tiny_config` with BERT's 30,522-token uncased vocabulary
(`../shared/data`) and 512 positions, written once as a google-research/bert
TF1 checkpoint (`uncased_L-12_H-768_A-12/`) and once as a Hugging Face
directory (`/path/to/hf_bert_dir`), with the same weights. The fixtures that
several tests share are built once per session even on two xdist workers
(`_once`: a file lock in the session's tmp dir).
"""

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from tests import testing

README = os.path.join(testing.ROOT, "README.md")
DOCS = os.path.join(testing.ROOT, "docs")
W = "@W@"  # The fixture directory, filled in last (so no rule matches in it).

# Every block of every page, by page and first line: what this file does with
# it (its name, unique across pages).
BLOCKS = {
    "README.md": {
        "python3 -m venv .venv && .venv/bin/pip install -q -r requirements.txt"
        " && .venv/bin/python -m official_bert.quickstart":
            "quickstart (checked)",
        "python3 -m venv .venv && .venv/bin/pip install -q -r "
        "requirements-test.txt && .venv/bin/python -m pytest -q":
            "test command (checked)",
        "  Return a new [MASK] containing the items of the iterable.":
            "quickstart demo output (checked)",
        "import tensorflow as tf\nfrom export import tfhub_modules":
            "model in the README",
    },
    "docs/model.md": {
        "from official_bert import configs": "model",
        "python -m official_bert.extract_features --input_file=sentences.txt "
        "--output_file=features.jsonl \\": "extract_features",
    },
    "docs/tokenizer.md": {
        "import tensorflow as tf\nfrom official_bert.data import tokenization":
            "tokenizer",
        "from official_bert import tokenization  # the original: import "
        "tokenization": "word alignment",
    },
    "docs/pretraining-data.md": {
        "python -m tfrecords.learn_vocab --input_file='corpus/*.txt' "
        "--output_file=vocab.txt \\": "learn_vocab",
        "python -m tfrecords.create_pretraining_data "
        "--input_file='corpus/*.txt' \\": "create_pretraining_data",
        "python -m tfrecords.create_pretraining_data_beam "
        "--input_file='corpus/*.txt' \\": "create_pretraining_data_beam",
        "python3 -m venv /tmp/beamvenv": "dask recipe (checked)",
        "[create_pretraining_data_beam] done: wrote 572 instances (51.4% "
        "random next) to 4 shard(s) of /tmp/elsewhere/out/dask.tfrecord in "
        "10.0 s (57 instances/s) on DaskRunner; documents, tokens, "
        "undecodable lines, empty files: not reported by this runner "
        "(DaskRunner has no metrics; instances counted from the shards)":
            "dask summary line (checked)",
        "# 1) Let Beam build an sdist of the checkout (it accepts "
        "pyproject.toml; `pip install build` first,": "dataflow (checked)",
        "python -m tfrecords.create_pretraining_data_beam --input_file=... "
        "--output_file=/shared/out/pretrain.tfrecord \\":
            "portable runner (checked)",
    },
    "docs/pretraining.md": {
        "python -m tfrecords.create_pretraining_data "
        "--input_file=../shared/data/pydocs_corpus.txt \\": "pretraining",
        "python -m tfrecords.create_pretraining_data "
        "--next_sentence_prediction=false \\": "modern recipe",
        "python -m official_bert.run_pretraining "
        "--input_file=/tmp/pydocs_full.tfrecord \\": "packed rows",
    },
    "docs/domain-adaptation.md": {
        "python -m official_bert.extend_checkpoint "
        "--init_checkpoint=uncased_L-12_H-768_A-12 \\": "domain adaptation",
        "learned 1855 whole words the vocabulary lacks from 70216 lines of "
        "--domain_corpus": "extend_checkpoint's output (checked)",
    },
    "docs/classification.md": {
        "text,label": "my_task's CSV (the fixture's files)",
        "python -m official_bert.run_classifier --task_data_dir=my_task \\":
            "classifier from the quickstart",
        "import json\nimport tensorflow as tf": "query the classifier",
        "python -m official_bert.run_classifier --task_name=MRPC "
        "--do_train=true --do_eval=true \\": "glue",
        "python -m official_bert.run_classifier \\": "classifier",
        "python -m official_bert.run_classifier --task_type=multi_label \\":
            "multi-label classifier",
        "python -m tools.long_document_task --out_dir=/tmp/long_docs "
        "--doc_pieces=800": "long documents",
        "python -m benchmarks.long_document_benchmark "
        "--work_dir=/tmp/long_docs_benchmark": "long document benchmark",
        "python -m benchmarks.long_document_benchmark "
        "--work_dir=/tmp/long_128 --size=bert_tiny \\":
            "long document benchmark at 128",
    },
    "docs/sentence-embeddings.md": {
        "python -m tools.retrieval_task --out_dir=/tmp/pairs --train=2000 "
        "--dev=500": "sentence embeddings",
        "python -m benchmarks.embedding_benchmark "
        "--work_dir=/tmp/embedding_benchmark": "embedding benchmark",
    },
    "docs/search.md": {
        "python -m tools.retrieval_task --out_dir=/tmp/hard_pairs --train=2000 "
        "--dev=500 --next_sentence": "hard negatives",
        "python -m official_bert.run_embedding --task_data_dir=/tmp/hard_pairs "
        "\\": "large batches",
        "python -m export.export_saved_model --bert_config_file=minilm/"
        "bert_config.json \\": "reranker",
        "import numpy as np": "retrieve then rerank (run by reranker_test)",
        "python -m benchmarks.reranker_benchmark "
        "--work_dir=/tmp/reranker_benchmark \\": "reranker benchmark",
        "python -m benchmarks.embedding_benchmark --work_dir=/tmp/mining_gain "
        "--hf_model=DIR \\": "mining gain benchmark",
    },
    "docs/ner.md": {
        "python -m official_bert.run_ner --task_data_dir=conll2003 \\": "ner",
        "python -m tools.pydocs_ner --output_dir=/tmp/pydocs_ner "
        "--max_eval_sentences=600": "ner from the quickstart",
    },
    "docs/squad.md": {
        "python -m official_bert.run_squad \\": "squad",
        "python -m tools.squad_task --out_dir=/tmp/pydocs_qa":
            "squad from the quickstart",
    },
    "docs/checkpoints.md": {
        "python -m official_bert.convert_checkpoint "
        "--source=uncased_L-12_H-768_A-12 --output_dir=/tmp/bert_base":
            "convert_checkpoint",
        "python -m export.export_checkpoint --format=huggingface \\\n"
        "  --bert_config_file=bert_base/bert_config.json \\":
            "export_checkpoint huggingface",
        "Wrote /tmp/bert_hf: huggingface, pretraining from "
        "bert_base/bert_model.ckpt, 206 tensors; 6.6 s":
            "export_checkpoint's output (checked)",
        "import torch\nfrom transformers import AutoTokenizer, "
        "BertForPreTraining": "transformers loading",
        "python -m export.export_checkpoint --format=huggingface \\\n"
        "  --bert_config_file=/tmp/mrpc_output/bert_config.json \\":
            "export_checkpoint from the glue run",
        "from transformers import pipeline": "pipeline loading",
        "python -m export.export_checkpoint --format=sentence_transformers "
        "\\": "export_checkpoint sentence_transformers",
        "from sentence_transformers import SentenceTransformer":
            "sentence-transformers loading",
        "python -m export.export_checkpoint --format=google_tf1 \\":
            "export_checkpoint google_tf1",
        "import tensorflow as tf": "list_variables",
        "python -m official_bert.quickstart --export_huggingface":
            "quickstart --export_huggingface (checked)",
    },
    "docs/accelerators.md": {
        "python -m benchmarks.jax_gpu_step --config=base "
        "--batch_size=64 \\": "gpu step",
    },
    "docs/export-and-serving.md": {
        "python -m export.export_tfhub "
        "--bert_config_file=bert_base/bert_config.json \\": "export_tfhub",
        "import tensorflow as tf\nimport tensorflow_text  # registers the "
        "preprocessor's TF Text ops: import it before loading":
            "tfhub loading",
        "python -m export.export_saved_model "
        "--bert_config_file=bert_base/bert_config.json \\":
            "export_saved_model",
        "from export import serving": "serving export in Python",
        "curl -s -X POST localhost:8501/v1/models/bert:predict \\":
            "curl (checked against the export)",
        '{"outputs": {"pooled_output": [[0.1948, -0.1011, -0.2043, ...], '
        '[0.1964, -0.108, -0.1974, ...]],': "curl's response (checked)",
        "python -c \"import sys, tensorflow_text; from tensorflow.python.tools."
        "saved_model_cli import main; sys.exit(main())\" \\":
            "saved_model_cli",
    },
    "docs/distillation.md": {
        "python -m official_bert.run_classifier \\": "student",
        "python -m official_bert.run_classifier --teacher=/tmp/sst2 \\":
            "distilled student",
        "python -m official_bert.run_embedding --teacher=minilm "
        "--distill_data=/tmp/texts.txt \\": "distilled embedding student",
        "from export import client_tokenizer, litert_int8": "int8 client",
        "python -m benchmarks.distillation_benchmark "
        "--work_dir=/tmp/hard_distill --init_checkpoint=minilm \\":
            "distillation benchmark",
        "python -m benchmarks.embedding_benchmark "
        "--work_dir=/tmp/embedding_distill --hf_model=DIR \\":
            "embedding distillation benchmark",
        "python -m benchmarks.distillation_benchmark "
        "--work_dir=/tmp/ml_distill --init_checkpoint=minilm \\":
            "multi-label distillation benchmark",
    },
}

# (regex, replacement, reason), applied in order to every block run.
SUBSTITUTIONS = [
    (r"(?<![\w/.])/tmp/", W + "/out/",
     "outputs go to pytest's tmp dir, not the machine's /tmp"),
    (r"/models/bert", W + "/models/bert",
     "the TF Serving model base path: a tmp dir"),
    (r"(?<![\w/.])uncased_L-12_H-768_A-12", W + "/uncased_L-12_H-768_A-12",
     "Google's release folder: a tiny BERT in the original's TF1 names"),
    (r"/path/to/hf_bert_dir", W + "/hf_bert_dir",
     "a tiny Hugging Face BertForPreTraining directory, the same weights"),
    (r"\$BERT_BASE_DIR", W + "/out/bert_base",
     "the converted checkpoint that convert_checkpoint's block writes"),
    (r"(?<![\w/.])bert_base(?=[/ \n])", W + "/out/bert_base",
     "the converted checkpoint that convert_checkpoint's block writes"),
    (r"\$GLUE_DIR", W + "/glue", "tiny MRPC .tsv files in GLUE's layout"),
    (r"(?<![\w/.])glue/SST-2", W + "/glue/SST-2",
     "tiny SST-2 .tsv files (sentence, label columns)"),
    (r"(?<![\w/.])my_task(?![\w/])", W + "/my_task",
     "the CSV the page shows, as its train, dev and test files"),
    (r"(?<![\w/.])conll2003", W + "/conll2003", "tiny CoNLL-2003 files"),
    (r"(?<![\w/.])squad/", W + "/squad/",
     "../shared/data/squad_v2_sample.json as the train and dev files"),
    (r"'corpus/\*\.txt'", "'" + W + "/corpus/*.txt'",
     "a tiny corpus of two files"),
    (r"--input_file=\.\./shared/data/pydocs_corpus\.txt",
     "--input_file=" + W + "/corpus/b.txt",
     "shortened: pretraining data from a tiny corpus file, not 1.09M words"),
    (r"--output_file=vocab\.txt", "--output_file=" + W + "/out/vocab.txt",
     "the learned vocabulary goes to the tmp dir"),
    (r"--vocab_size=30522 ", "--vocab_size=300 ",
     "shortened: a vocabulary the tiny corpus supports"),
    (r"--bert_config_file=bert_config\.json",
     "--bert_config_file=" + W + "/quickstart/bert_config.json",
     "the tiny config (BERT's vocab size); the quickstart dir below uses it"),
    (r"(?<![\w/.])runs/quickstart", W + "/quickstart",
     "the pretraining block's model, vocab and config, laid out as the "
     "quickstart's work dir"),
    (r"--num_train_steps=1000 ", "--num_train_steps=4 ",
     "shortened: 4 pretraining steps"),
    (r"--steps_per_loop=100", "--steps_per_loop=2 --max_eval_steps=2",
     "shortened: 2 steps per loop, 2 eval steps"),
    (r"--max_seq_length=1024", "--max_seq_length=128",
     "shortened: 128-token sequences for the tiny model on 2 cores (the "
     "2x-length input runs in tests/extend_checkpoint_test.py)"),
    (r"--max_predictions_per_seq=150", "--max_predictions_per_seq=20",
     "shortened: the predictions of 128-token sequences"),
    (r"--max_eval_sentences=600", "--max_eval_sentences=6 "
     "--max_train_sentences=24", "shortened: 24 train, 6 dev/test sentences"),
    (r"--out_dir=" + W + r"/out/pydocs_qa", "--out_dir=" + W +
     "/out/pydocs_qa --max_train=12 --max_dev=6",
     "shortened: 12 train, 6 dev questions"),
    (r"--layers=-1,-2,-3,-4", "--layers=-1,-2",
     "the tiny model has 2 layers (BERT-Base 12)"),
    (r"(?<![\w/.])sentences\.txt", W + "/sentences.txt",
     "three input lines, one a pair"),
    (r"(?<![\w/.])features\.jsonl", W + "/out/features.jsonl",
     "the output goes to the tmp dir"),
    (r'tokenization\.FullTokenizer\("vocab\.txt"',
     'tokenization.FullTokenizer("' + testing.VOCAB + '"',
     "BERT's uncased vocabulary, so the ids in the comment can be checked"),
]

# The free variables of each ```python block, defined before it runs.
PRELUDES = {
    "model in the README": "",
    "query the classifier": "",
    "model": (
        "import numpy as np\n"
        "ids = np.array([[101, 7592, 2088, 102, 0], [101, 2088, 102, 0, 0],"
        " [101, 102, 0, 0, 0]], np.int32)\n"
        "mask = (ids > 0).astype(np.int32)\n"
        "type_ids = np.zeros_like(ids)\n"),
    "tokenizer": (
        "import tensorflow as tf\n"
        "texts = tf.constant(['The quick brown fox.', 'Héllo, world!'])\n"
        "ids = [101, 7592, 102]\n"
        "tokens = ['[CLS]', 'hello', '[SEP]']\n"),
    "word alignment": f"vocab_file = '{testing.VOCAB}'\n",
    "tfhub loading": "",
    "serving export in Python": (
        "from official_bert.modeling import finetuning_models\n"
        f"from official_bert import configs\n"
        f"config = configs.BertConfig.from_json_file("
        f"'{W}/quickstart/bert_config.json')\n"
        "model = finetuning_models.BertClassifier.from_bert_config(config, "
        "num_classes=3)\n"
        f"export_dir = '{W}/out/classifier_serving'\n"
        f"vocab_file = '{testing.VOCAB}'\n"),
    "transformers loading": "",
    "pipeline loading": "",
    "sentence-transformers loading": "",
    "list_variables": "",
    # An int8 export's version folder as --quantize=int8 writes it (the
    # tiny classifier's model.tflite and the vocabulary asset), where the
    # block reads it.
    "int8 client": (
        "import os, shutil\n"
        "from export import litert_int8, serving\n"
        "from official_bert import configs\n"
        "from official_bert.modeling import finetuning_models\n"
        f"config = configs.BertConfig.from_json_file("
        f"'{W}/quickstart/bert_config.json')\n"
        "classifier = finetuning_models.BertClassifier.from_bert_config("
        "config, num_classes=2)\n"
        f"os.makedirs('{W}/out/sst2_student_serving/1/assets')\n"
        f"shutil.copy('{testing.VOCAB}', "
        f"'{W}/out/sst2_student_serving/1/assets/vocab.txt')\n"
        f"litert_int8.write('{W}/out/sst2_student_serving/1', "
        "serving.int8_model(classifier, litert_int8.model_outputs, "
        f"'{testing.VOCAB}', True, 128))\n"),
}

# Commands of the README that cannot run here, by their start.
NOT_RUN = {
    "docker run ": "no Docker daemon and no network for tensorflow/serving",
    "#   or: tensorflow_model_server ": "(a comment) the model server is not "
    "installable offline; tests/serving_test.py checks what it relies on",
    "curl ": "needs a running TF Serving (not installable offline): its "
             "request body is fed to the exported signature instead",
}


# Whole ```sh blocks that no test runs as written: (why, the test that
# checks them instead). Every other ```sh block is run by `_run_sh`, or is in
# FLAGS_CHECKED_BLOCKS.
NOT_RUN_BLOCKS = {
    "quickstart (checked)": (
        "a fresh venv and minutes of pretraining: tests/quickstart_test.py "
        "runs the program shortened",
        "test_the_two_commands_are_what_ci_and_the_quickstart_test_run"),
    "test command (checked)": (
        "the whole suite, which holds this test: .ci/run runs it",
        "test_the_two_commands_are_what_ci_and_the_quickstart_test_run"),
    "quickstart --export_huggingface (checked)": (
        "a whole quickstart (minutes): tests/quickstart_test.py runs this "
        "command shortened",
        "test_quickstart_export_block_is_what_quickstart_test_runs"),
    "curl (checked against the export)": (
        "needs a running TF Serving (not installable offline)",
        "test_curl_request_and_response_match_the_export"),
    "dask recipe (checked)": (
        "a fresh venv and `pip install .` (minutes, network) and /data "
        "paths: tests/create_pretraining_data_beam_dask_test.py starts the "
        "same scheduler and workers and runs the same pipeline",
        "test_dask_recipe_is_what_the_dask_test_runs"),
    "dataflow (checked)": (
        "needs a Google Cloud project, apache-beam[gcp] and the network",
        "test_cluster_blocks_use_flags_and_options_that_exist"),
    "portable runner (checked)": (
        "needs a Flink or Spark job service and Docker",
        "test_cluster_blocks_use_flags_and_options_that_exist"),
}


# Whole ```sh blocks whose run another test makes (the same program on the
# same kind of data, with the claims this file checked of the block's
# outputs): here each of their commands is parsed by its program's own flag
# definitions (testing.check_program_flags: no run), so a renamed or removed
# flag, or a value it no longer takes, still fails; the test named runs it.
FLAGS_CHECKED_BLOCKS = {
    "gpu step": (
        "tests/jax_gpu_step_test.py::"
        "test_the_gpu_script_runs_packed_and_fused_on_the_cpu: the same "
        "script, packed and fused, on JAX's CPU (the block needs a GPU)"),
    "packed rows": (
        "tests/run_pretraining_test.py::"
        "test_without_next_sentence_prediction_trains_evaluates_and_exports: "
        "--next_sentence_prediction=false --pack_sequences trains and "
        "evaluates on records of the data job's layout (the modern recipe's "
        "records come from the block before, which runs)"),
    "classifier": (
        "tests/run_classifier_test.py::"
        "test_fine_tuning_learns_evaluates_predicts_and_resumes: "
        "--task_data_dir with column flags, train, eval, test_results.tsv "
        "and the export (SST-2's layout: tests/glue_test.py)"),
    "multi-label classifier": (
        "tests/multi_label_test.py::"
        "test_learns_evaluates_tunes_predicts_and_exports: --task_type="
        "multi_label with --tune_thresholds, train, eval, test_results.tsv "
        "and the export"),
    "long documents": (
        "tests/long_document_test.py::"
        "test_windows_learn_beat_truncation_and_export_one_row_per_text: "
        "tools.long_document_task's task, run_classifier --doc_stride, "
        "eval, predict and the export"),
    "long document benchmark": (
        "tests/long_document_test.py::"
        "test_windows_learn_beat_truncation_and_export_one_row_per_text: "
        "the same training, windows and evaluations on the same task's "
        "documents (the benchmark trains three models: minutes)"),
    "long document benchmark at 128": (
        "tests/long_document_test.py::"
        "test_windows_learn_beat_truncation_and_export_one_row_per_text: "
        "the same windows; this run's Hugging Face side fine-tunes at 512 "
        "(three seeds of both sides: minutes)"),
    "sentence embeddings": (
        "tests/embedding_test.py::"
        "test_trains_exports_and_sentence_transformers_encode_agrees: "
        "tools.retrieval_task's pairs, run_embedding train, eval and the "
        "export, export_checkpoint --format=sentence_transformers of its "
        "output_dir, encode against the export"),
    "embedding benchmark": (
        "tests/embedding_test.py::"
        "test_trains_exports_and_sentence_transformers_encode_agrees: "
        "run_embedding on tools.retrieval_task's pairs and "
        "sentence-transformers on its export (the benchmark trains a "
        "6-layer BERT twice a round: minutes)"),
    "reranker": (
        "tests/reranker_test.py::"
        "test_rerank_signature_gives_the_runs_scores_and_metrics: "
        "run_reranker with --retriever (an export with sentence_embedding), "
        "train, eval and the export; tests/reranker_test.py::"
        "test_cross_encoder_on_the_hugging_face_export_gives_the_same_scores:"
        " export_checkpoint --format=huggingface of the run's best/ "
        "(this block trains all-MiniLM-L6-v2 on 2,000 queries: minutes)"),
    "reranker benchmark": (
        "tests/reranker_test.py::"
        "test_benchmark_without_datasets_is_one_sentence: the benchmark "
        "stops in one sentence without `datasets` (its --smoke run takes "
        "~100 s, run by hand; the real one trains all-MiniLM-L6-v2 three "
        "times: minutes)"),
    "large batches": (
        "tests/gradcache_test.py::"
        "test_mini_batch_size_reaches_the_train_step: run_embedding with "
        "--mini_batch_size (GradCache), and its replicas test, the two "
        "logical devices' shared negatives (this block trains "
        "all-MiniLM-L6-v2 at batch 256: minutes)"),
    "hard negatives": (
        "tests/hard_negatives_test.py::"
        "test_run_embedding_mines_every_epoch_and_a_killed_run_resumes_exactly: "
        "run_embedding --mine_hard_negatives on tools.retrieval_task's "
        "pairs, mined (and mined again with --remine_every_epoch), trained "
        "on and reused by the resumed rerun (this block trains "
        "all-MiniLM-L6-v2 on 2,000 pairs: minutes)"),
    "ner": (
        "tests/run_ner_test.py::"
        "test_trains_predicts_exports_and_resumes_after_sigkill: train, "
        "eval_f1, predict and the export (CoNLL-2003's files: "
        "tests/ner_data_test.py)"),
    "squad": (
        "tests/original_readme_test.py::"
        "test_tpu_commands_say_no_tpu_can_be_reached: run_squad v2.0 on "
        "the shared sample, then squad_evaluate with --na-prob-file; "
        "tests/run_squad_test.py: train, predict and the export"),
    "domain adaptation": (
        "tests/extend_checkpoint_test.py::"
        "test_converted_hugging_face_bert_survives_the_recipe: "
        "extend_checkpoint, create_pretraining_data, run_pretraining from "
        "it, run_classifier from that"),
    "student": (
        "tests/student_layers_test.py::"
        "test_a_student_fine_tunes_from_the_teachers_layers: run_classifier "
        "--student_layers from a teacher checkpoint, bert_config.json and "
        "the student's weights (the export with --quantize=int8: "
        "tests/run_classifier_test.py)"),
    "distilled student": (
        "tests/distillation_test.py::"
        "test_classifier_student_fits_the_cached_teacher_and_resumes: "
        "run_classifier --teacher with --distill_alpha and "
        "--distill_temperature, the cache, eval_results.txt's teacher keys"),
    "distillation benchmark": (
        "tests/distillation_test.py::"
        "test_classifier_student_fits_the_cached_teacher_and_resumes: "
        "run_classifier --teacher, which the benchmark runs (its --smoke: "
        "run by hand, minutes; the real one trains 5 rows a seed)"),
    "multi-label distillation benchmark": (
        "tests/distillation_test.py::"
        "test_multi_label_student_fits_per_label_probabilities: "
        "run_classifier --task_type=multi_label --teacher, which the "
        "benchmark runs (its --smoke --task=topics: run by hand, ~2 "
        "minutes; the real one trains 5 rows a seed)"),
    "mining gain benchmark": (
        "tests/hard_negatives_test.py::"
        "test_run_embedding_mines_every_epoch_and_a_killed_run_resumes_exactly: "
        "run_embedding --mine_hard_negatives, which the benchmark runs "
        "beside sentence-transformers' trainer (all-MiniLM-L6-v2 four "
        "times: minutes)"),
    "embedding distillation benchmark": (
        "tests/distillation_test.py::"
        "test_embedding_student_fits_a_folders_embeddings_and_counts_texts: "
        "run_embedding --teacher --distill_alpha=1, which the benchmark runs "
        "with --student_layers (tests/student_layers_test.py); it trains "
        "all-MiniLM-L6-v2 twice and sentence-transformers once: minutes)"),
    "distilled embedding student": (
        "tests/distillation_test.py::"
        "test_embedding_student_fits_a_folders_embeddings_and_counts_texts: "
        "run_embedding --teacher=<a converted model's folder> "
        "--distill_data"),
}


def _pages():
  """README.md and every docs/*.md page, as paths relative to the root."""
  return ["README.md"] + sorted(
      f"docs/{name}" for name in os.listdir(DOCS) if name.endswith(".md"))


def _read(page):
  with open(os.path.join(testing.ROOT, page), encoding="utf-8") as f:
    return f.read()


def _readme():
  return _read("README.md")


def _key(page, text):
  """The block's key in BLOCKS[page]: its first line (first two where the
  first is shared); an unknown block's first line."""
  for first in BLOCKS.get(page, {}):
    if text.startswith(first + "\n"):
      return first
  return text.split("\n", 1)[0]


def _blocks():
  """[(page, language, key, text)] of every fenced block of every page."""
  return [(page, m.group(1), _key(page, m.group(2)), m.group(2))
          for page in _pages()
          for m in re.finditer(r"^```(\w*)\n(.*?)^```", _read(page),
                               flags=re.S | re.M)]


def _block(name):
  texts = [text for page, _, first, text in _blocks()
           if BLOCKS.get(page, {}).get(first) == name]
  assert len(texts) == 1, f"block {name!r}: found {len(texts)}"
  return texts[0]


def _substitute(text, world):
  for pattern, replacement, _ in SUBSTITUTIONS:
    text = re.sub(pattern, replacement, text)
  return text.replace(W, str(world))


def _commands(text):
  """The block's commands, continuation lines joined, comments kept."""
  return re.sub(r"\\\n\s*", "", text).splitlines()


def _env():
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  env["PYTHONPATH"] = testing.ROOT + os.pathsep + env.get("PYTHONPATH", "")
  # `python` in a block is this interpreter.
  env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
  return env


def _child_cpu():
  import resource  # pylint: disable=g-import-not-at-top
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  return usage.ru_utime + usage.ru_stime


def _log_cpu(name, start):
  path = os.environ.get("README_SNIPPETS_CPU_LOG")
  if path:
    with open(path, "a") as f:
      f.write(f"{name}\t{_child_cpu() - start:.1f}\n")


# A command that bash would only split into words: no expansion, pipe or
# redirection left after SUBSTITUTIONS (quotes are removed as bash would).
_PLAIN_COMMAND = re.compile(r"python -m [\w.]+( [^$`|&;<>(){}\\]*)?")


def _program_words(command):
  """The words of `command` when it is a plain `python -m <program> ...`
  (bash would only split it into words: a trailing comment dropped, no
  unquoted glob), else None."""
  plain = re.sub(r"\s+#[^'\"]*$", "", command)  # `  # -> where it writes`
  unquoted = re.sub(r"'[^']*'", "", plain)
  if not _PLAIN_COMMAND.fullmatch(plain) or re.search(r"[*?\[]", unquoted):
    return None
  return shlex.split(plain)


def _run_sh(name, world):
  """Runs block `name` from the repo root, command by command, stopping at
  the first that fails; returns their output. `python -m <program> ...`
  runs in this process (testing.run_program, its words split as bash
  splits them); any other command runs with bash."""
  commands = []
  for command in _commands(_substitute(_block(name), world)):
    if any(command.startswith(start) for start in NOT_RUN):
      continue
    commands.append(command)
  output = []
  for command in commands:
    if command.lstrip().startswith("#"):
      continue
    words = _program_words(command)
    if words:
      proc = testing.run_program(words[2], words[3:], check=False,
                                 merge_stderr=True)
    else:
      start = _child_cpu()
      proc = subprocess.run(["bash", "-euo", "pipefail", "-c", command],
                            cwd=testing.ROOT, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, timeout=900)
      _log_cpu(name, start)
    output.append(proc.stdout)
    assert proc.returncode == 0, (
        f"block {name!r} failed ({proc.returncode}) at:\n{command}\n---\n"
        + "".join(output)[-5000:])
  return "".join(output)


def _check_flags(name, world):
  """Parses each `python -m` command of block `name` (FLAGS_CHECKED_BLOCKS)
  with its program's flag definitions; returns the commands."""
  commands = [command for command in
              _commands(_substitute(_block(name), world))
              if not command.lstrip().startswith("#")]
  for command in commands:
    words = _program_words(command)
    assert words, command
    proc = testing.check_program_flags(words[2], words[3:])
    assert proc.returncode == 0, f"{command}\n---\n{proc.stdout[-3000:]}"
  return commands


# After each ```python block: lines that print what its test checks.
CHECKS = {
    "model in the README": (
        "print('README shapes', tuple(outputs['sequence_output'].shape), "
        "tuple(outputs['pooled_output'].shape))\n"),
    "query the classifier": (
        "print('labels', labels)\n"
        "print('sums', [round(float(x), 4) for x in probabilities.sum(-1)])\n"),
    "model": (
        "print('shapes', tuple(outputs['sequence_output'].shape), "
        "tuple(outputs['pooled_output'].shape))\n"
        "print('logits', sorted(model(dict(input_word_ids=ids, input_mask=mask,"
        " input_type_ids=type_ids, masked_lm_positions=ids[:, :2] * 0 + 1)))"
        ")\n"),
    "tokenizer": (
        "print('ids', tokenizer.tokenize(tf.constant(['H\u00e9llo, world!']))"
        ".to_list())\n"),
    "word alignment": (
        "print('bert_tokens ==', bert_tokens)\n"
        "print('orig_to_tok_map ==', orig_to_tok_map)\n"),
    "tfhub loading": "print('pooled', outputs['pooled_output'].shape)\n",
    "serving export in Python": (
        "import tensorflow as tf, tensorflow_text\n"
        f"loaded = tf.saved_model.load('{W}/out/classifier_serving/1')\n"
        "result = loaded.signatures['serving_default'](text=tf.constant(['Hi.'"
        "]))\n"
        "print('probabilities', result['probabilities'].shape)\n"),
    "transformers loading": (
        "print('hf class', type(model).__name__, "
        "tuple(outputs.prediction_logits.shape[::2]), "
        "tuple(outputs.seq_relationship_logits.shape))\n"
        "print('hf word', repr(tokenizer.decode("
        "outputs.prediction_logits[0, position].argmax())))\n"),
    "pipeline loading": (
        "print('pipeline class', type(classifier.model).__name__, "
        "sorted(classifier.model.config.id2label.values()))\n"),
    "sentence-transformers loading": (
        "import numpy as np\n"
        "print('st norms', [round(float(n), 4) for n in "
        "np.linalg.norm(embeddings, axis=1)])\n"
        "print('st modules', [type(m).__name__ for m in model])\n"),
    # The export holds the release's weights (convert_checkpoint, then
    # export_checkpoint) under the release's names, without its Adam slots
    # and global_step.
    "list_variables": (
        "import numpy as np\n"
        f"exported = tf.train.load_checkpoint('{W}/out/bert_tf1/"
        "bert_model.ckpt')\n"
        f"release = tf.train.load_checkpoint('{W}/uncased_L-12_H-768_A-12/"
        "bert_model.ckpt')\n"
        "names = sorted(n for n in release.get_variable_to_shape_map() if "
        "n != 'global_step' and not n.endswith(('/adam_m', '/adam_v')))\n"
        "print('tf1 names', sorted(exported.get_variable_to_shape_map()) == "
        "names)\n"
        "print('tf1 weights', all(np.array_equal(exported.get_tensor(n), "
        "release.get_tensor(n)) for n in names))\n"
        "print('tf1 first', [(n, release.get_variable_to_shape_map()[n]) "
        "for n in names[:3]])\n"),
    # The client's ids are the export's own packing of the same texts.
    "int8 client": (
        "import tensorflow as tf\n"
        "from official_bert.data import segment_packing, tokenization\n"
        f"graph = tokenization.FullTokenizer('{testing.VOCAB}')\n"
        "want = segment_packing.pack_to_longest([graph.tokenize(tf.constant("
        "['a gripping, funny film', 'dull']))], 128, graph.cls_id, "
        "graph.sep_id)\n"
        "print('client ids equal', all(want[k].shape == inputs[k].shape and "
        "(want[k].numpy() == inputs[k]).all() for k in want))\n"
        "print('int8 logits', logits.shape)\n"),
}

_RUNNER = """
import sys, traceback
for name, source in BLOCKS:
  print(f"=== {name}", flush=True)
  try:
    exec(compile(source, name, "exec"), {"__name__": "__main__"})
    print("=== ok", flush=True)
  except BaseException:
    traceback.print_exc(file=sys.stdout)
    print("=== failed", flush=True)
"""


def _run_python_blocks(world):
  """Runs every ```python block (prelude, block, its CHECKS) in one fresh
  interpreter (one TensorFlow start-up), each in its own namespace;
  returns {name: (ok, output)}."""
  # Only the README's text is substituted: the preludes and checks hold real
  # paths (the vocabulary under ../shared, wherever the clone lives).
  blocks = [(name, (PRELUDES[name] + _substitute(_block(name), world) + "\n" +
                    CHECKS[name]).replace(W, str(world)))
            for name in PRELUDES]
  start = _child_cpu()
  proc = subprocess.run(
      [sys.executable, "-c", f"BLOCKS = {blocks!r}\n" + _RUNNER],
      cwd=testing.ROOT, env=_env(), stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True, timeout=900)
  _log_cpu("python blocks", start)
  results = {}
  for part in proc.stdout.split("=== ")[1:]:
    name, _, rest = part.partition("\n")
    if name in PRELUDES:
      results[name] = [False, rest]
    elif name == "ok\n" or name == "ok":
      results[list(results)[-1]][0] = True
  for name, source in blocks:
    if name not in results:
      results[name] = [False, f"not run:\n{proc.stdout[-3000:]}"]
    results[name].append(source)
  return results


def _python_block(results, name):
  ok, out, source = results[name]
  assert ok, f"block {name!r} failed:\n{source}\n---\n{out[-5000:]}"
  return out


# ---- fixtures: tiny real files where the README has placeholders ----

SENTENCES = [
    ["The quick brown fox jumps over the lazy dog.",
     "The dog sleeps in the sun all day.",
     "A fox is a small animal with a long tail."],
    ["Python is a programming language.",
     "It reads files and writes them back.",
     "The open function returns a file object.",
     "Close the file when you are done."],
    ["Paris is the capital of France.",
     "The river Seine runs through the city.",
     "Many people visit the city every year."],
]


def _write(path, text):
  os.makedirs(os.path.dirname(str(path)), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)


def _tiny_config():
  return testing.tiny_config(vocab_size=30522, max_position_embeddings=512)


def _shared_root(tmp_path_factory):
  """A directory of this pytest session that every xdist worker sees."""
  root = tmp_path_factory.getbasetemp()
  if os.environ.get("PYTEST_XDIST_WORKER"):
    root = root.parent  # .../pytest-N/popen-gwK -> .../pytest-N
  root = root / "readme_snippets"
  os.makedirs(root, exist_ok=True)
  return root


def _once(root, name, build):
  """build() once per test session, whichever xdist worker asks first (the
  other waits for it); returns build()'s JSON value, or fails as it did."""
  import fcntl  # pylint: disable=g-import-not-at-top
  with open(root / f"{name}.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    done = root / f"{name}.done.json"
    if done.exists():
      with open(done, encoding="utf-8") as f:
        record = json.load(f)
    else:
      try:
        record = {"value": build()}
      except BaseException as e:
        record = {"error": f"{type(e).__name__}: {e}"}
        with open(done, "w", encoding="utf-8") as f:
          json.dump(record, f)
        raise
      with open(done, "w", encoding="utf-8") as f:
        json.dump(record, f)
  if "error" in record:
    pytest.fail(f"{name}, built by another test worker, failed: "
                f"{record['error'][-4000:]}")
  return record["value"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  testing.require_shared_data()
  root = _shared_root(tmp_path_factory)
  _once(root, "world", lambda: _build_world(root / "w"))
  return root / "w"


def _build_world(w):
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from official_bert.training import checkpoint_names  # pylint: disable=g-import-not-at-top
  os.makedirs(w)
  config = _tiny_config()
  # The same weights as a Hugging Face directory and a TF1 release folder.
  torch.manual_seed(0)
  hf = transformers.BertForPreTraining(
      transformers.BertConfig(**config.to_dict())).eval()
  hf.save_pretrained(str(w / "hf_bert_dir"))
  state = {k: v.detach().numpy() for k, v in hf.state_dict().items()}
  arrays, _ = checkpoint_names.from_hf_state_dict(state)
  testing.write_tf1_checkpoint(str(w / "uncased_L-12_H-768_A-12"), arrays,
                               config)
  for folder in ("hf_bert_dir", "uncased_L-12_H-768_A-12"):
    shutil.copy(testing.VOCAB, w / folder / "vocab.txt")
  # The quickstart's work dir: the pretraining block trains into out/. Its
  # model has 1 layer: the blocks that train from it (pretraining at 128
  # positions, the modern recipe, the classifier, NER and SQuAD from the
  # quickstart) show how they run, not what depth does, and each further
  # layer at batch 32 x 128 costs more than the first.
  os.makedirs(w / "out")
  os.makedirs(w / "quickstart")
  config.replace(num_hidden_layers=1).to_json_file(
      str(w / "quickstart" / "bert_config.json"))
  shutil.copy(testing.VOCAB, w / "quickstart" / "vocab.txt")
  os.symlink(w / "out" / "pretraining", w / "quickstart" / "pretraining")
  # Two corpus files: one sentence per line, a blank line between documents.
  for name, docs in (("a.txt", SENTENCES[:2]), ("b.txt", SENTENCES)):
    _write(w / "corpus" / name,
           "\n\n".join("\n".join(doc) for doc in docs * 3) + "\n")
  # MRPC as the GLUE download has it (quality, ids, both strings).
  pairs = [("1", "The fox jumps over the dog.", "A fox jumps over a dog."),
           ("0", "Paris is in France.", "The dog sleeps all day."),
           ("1", "Python reads files.", "Files are read by Python."),
           ("0", "The river runs.", "Close the file when done."),
           ("1", "Many people visit Paris.", "Paris has many visitors.")]
  header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
  rows = "".join(f"{q}\t{i}\t{i + 100}\t{a}\t{b}\n"
                 for i, (q, a, b) in enumerate(pairs))
  _write(w / "glue" / "MRPC" / "train.tsv", header + rows)
  _write(w / "glue" / "MRPC" / "dev.tsv", header + rows)
  _write(w / "glue" / "MRPC" / "test.tsv",
         "index\t#1 ID\t#2 ID\t#1 String\t#2 String\n" +
         "".join(f"{i}\t{i}\t{i + 100}\t{a}\t{b}\n"
                 for i, (_, a, b) in enumerate(pairs)))
  sst = "sentence\tlabel\n" + "".join(
      f"{s}\t{i % 2}\n" for i, s in enumerate(sum(SENTENCES, [])))
  for split in ("train", "dev", "test"):
    _write(w / "glue" / "SST-2" / f"{split}.tsv", sst)
  conll = ("-DOCSTART- -X- -X- O\n\n"
           "EU NNP B-NP B-ORG\nrejects VBZ B-VP O\nGerman JJ B-NP B-MISC\n"
           "call NN I-NP O\n\nPeter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n"
           "\nParis NNP B-NP B-LOC\nis VBZ B-VP O\nin IN B-PP O\n"
           "France NNP B-NP B-LOC\n. . O O\n")
  for split in ("train", "dev", "test"):
    _write(w / "conll2003" / f"{split}.txt", conll)
  for split in ("train", "dev"):
    os.makedirs(w / "squad", exist_ok=True)
    shutil.copy(os.path.join(testing.SHARED_DATA, "squad_v2_sample.json"),
                w / "squad" / f"{split}-v2.0.json")
  # The CSV of docs/classification.md, as it is shown, for each split.
  csv_text = _block("my_task's CSV (the fixture's files)")
  for split in ("train", "dev", "test"):
    _write(w / "my_task" / f"{split}.csv", csv_text)
  _write(w / "sentences.txt", "The quick brown fox.\nHello world!\n"
         "Paris is the capital of France. ||| It is in Europe.\n")


@pytest.fixture(scope="module")
def bert_base(world):
  """Both convert_checkpoint commands; the second (Hugging Face) writes the
  /tmp/bert_base the other blocks read as bert_base/ and $BERT_BASE_DIR."""
  def build():
    out = _run_sh("convert_checkpoint", world)
    assert out.count("converted ") == 2, out
  _once(world.parent, "bert_base", build)
  return world / "out" / "bert_base"


@pytest.fixture(scope="module")
def pretrained(world):
  _once(world.parent, "pretrained", lambda: _run_sh("pretraining", world))
  return world / "out" / "pretraining"


@pytest.fixture(scope="module")
def serving_export(world, bert_base):
  del bert_base
  _once(world.parent, "serving_export",
        lambda: _run_sh("export_saved_model", world))
  return world / "models" / "bert" / "1"


@pytest.fixture(scope="module")
def quickstart_classifier(world, pretrained):
  """docs/classification.md's first run: the CSV, from the quickstart's model."""
  del pretrained
  _once(world.parent, "quickstart_classifier",
        lambda: _run_sh("classifier from the quickstart", world))
  return world / "out" / "my_task"


@pytest.fixture(scope="module")
def glue_run(world, bert_base):
  """docs/classification.md's MRPC run, from the converted checkpoint."""
  del bert_base
  _once(world.parent, "glue", lambda: _run_sh("glue", world))
  return world / "out" / "mrpc_output"


EXPORT_BLOCKS = ("export_checkpoint huggingface",
                 "export_checkpoint from the glue run",
                 "export_checkpoint sentence_transformers",
                 "export_checkpoint google_tf1")


@pytest.fixture(scope="module")
def exports(world, bert_base, glue_run):
  """docs/checkpoints.md's export_checkpoint blocks (from bert_base/ and
  the glue block's run): {block name: what it printed}."""
  del bert_base, glue_run
  return _once(world.parent, "exports",
               lambda: {name: _run_sh(name, world) for name in EXPORT_BLOCKS})


@pytest.fixture(scope="module")
def python_blocks(world, hub_export, pretrained, quickstart_classifier,
                  exports):
  """Every ```python block, run once (the TF-Hub one loads hub_export; the
  serving one builds a classifier from the pretraining block's config; the
  README's loads the pretraining block's checkpoint; the query loads the
  quickstart classifier's export; docs/checkpoints.md's load the
  export_checkpoint blocks' directories)."""
  del hub_export, pretrained, quickstart_classifier, exports
  return _once(world.parent, "python_blocks",
               lambda: _run_python_blocks(world))


@pytest.fixture(scope="module")
def hub_export(world, bert_base):
  del bert_base
  _once(world.parent, "hub_export", lambda: _run_sh("export_tfhub", world))
  return world / "out" / "bert_hub"


def _read_results(path):
  """eval_results.txt: `key = value` lines."""
  with open(path, encoding="utf-8") as f:
    return dict(line.strip().split(" = ") for line in f if " = " in line)


# ---- the README's blocks ----

def test_every_block_is_known():
  found = [(page, first) for page, _, first, _ in _blocks()]
  unknown = [(page, first) for page, first in found
             if first not in BLOCKS.get(page, {})]
  assert not unknown, (
      f"blocks this test does not run or check: {unknown}; add each "
      "to BLOCKS and run it")
  missing = [(page, first) for page in BLOCKS for first in BLOCKS[page]
             if (page, first) not in found]
  assert not missing, f"blocks that disappeared: {missing}"
  assert len(found) == len(set(found)), (
      "two blocks of a page share a first line")
  names = [name for page in BLOCKS.values() for name in page.values()]
  assert len(names) == len(set(names)), "two BLOCKS share a name"


def test_every_substitution_is_used():
  text = "\n".join(text for _, _, _, text in _blocks())
  for name in PRELUDES:
    text += PRELUDES[name]
  for pattern, replacement, _ in SUBSTITUTIONS:
    assert re.search(pattern, text), f"substitution {pattern!r} matches nothing"
    text = re.sub(pattern, replacement, text)


def test_what_is_not_run_is_only_what_cannot_run_here():
  skipped = [command for _, _, _, text in _blocks()
             for command in _commands(text)
             if any(command.startswith(start) for start in NOT_RUN)]
  assert len(skipped) == len(NOT_RUN), skipped
  assert all(command.startswith(("docker run ", "curl ", "#")) and
             ("tensorflow/serving" in command or "8501" in command)
             for command in skipped), skipped
  # Every ```sh block is run by `_run_sh`, or is in NOT_RUN_BLOCKS with the
  # test that checks it instead; not both.
  with open(__file__, encoding="utf-8") as f:
    run = set(re.findall(r'_run_sh\("([^"]+)"', f.read()))
  run |= set(EXPORT_BLOCKS)  # run by the exports fixture
  sh = {BLOCKS[page][first] for page, language, first, _ in _blocks()
        if language == "sh"}
  assert sh - run == set(NOT_RUN_BLOCKS) | set(FLAGS_CHECKED_BLOCKS), (
      sh - run, set(NOT_RUN_BLOCKS), set(FLAGS_CHECKED_BLOCKS))
  assert not run & (set(NOT_RUN_BLOCKS) | set(FLAGS_CHECKED_BLOCKS))
  assert not set(NOT_RUN_BLOCKS) & set(FLAGS_CHECKED_BLOCKS)
  for name, (reason, test) in NOT_RUN_BLOCKS.items():
    assert reason and callable(globals().get(test)), (name, test)
  # Each flag-checked block has its test here, and names a test that exists.
  with open(__file__, encoding="utf-8") as f:
    checked = set(re.findall(r'_check_flags\("([^"]+)"', f.read()))
  assert checked == set(FLAGS_CHECKED_BLOCKS), checked
  for name, where in FLAGS_CHECKED_BLOCKS.items():
    path, test = where.split(":", 1)[0], where.split("::")[1].split(":")[0]
    with open(os.path.join(testing.ROOT, path), encoding="utf-8") as f:
      assert f"def {test}(" in f.read(), (name, where)


def test_the_two_commands_are_what_ci_and_the_quickstart_test_run():
  quickstart = _block("quickstart (checked)").strip()
  tests = _block("test command (checked)").strip()
  with open(os.path.join(testing.ROOT, ".ci", "run"), encoding="utf-8") as f:
    ci = f.read().splitlines()
  assert tests in ci, f".ci/run does not run the README's {tests!r}"
  # The quickstart line is CI's venv set-up with requirements.txt (which
  # requirements-test.txt includes), then the program quickstart_test runs.
  venv, program = quickstart.rsplit(" && ", 1)
  assert venv.replace("requirements.txt", "requirements-test.txt") + (
      " && .venv/bin/python -m pytest -q") == tests
  with open(os.path.join(testing.ROOT, "requirements-test.txt")) as f:
    assert "-r requirements.txt" in f.read().splitlines()
  assert program == ".venv/bin/python -m official_bert.quickstart"
  with open(os.path.join(testing.ROOT, "tests", "quickstart_test.py")) as f:
    assert '[sys.executable, "-m", "official_bert.quickstart",' in f.read()


def test_the_quickstart_output_shown_is_what_the_demo_prints():
  from official_bert import quickstart  # pylint: disable=g-import-not-at-top
  lines = _block("quickstart demo output (checked)").splitlines()
  assert len(lines) == 4, lines
  # Printed as quickstart._demo prints: a fill-mask sentence and its top 5,
  # then similarity lines of its PAIRS.
  assert lines[0] == f"  {quickstart.FILL_MASK[0]}"
  assert re.fullmatch(r"    -> \S+(, \S+){4}", lines[1]), lines[1]
  for line in lines[2:]:
    match = re.fullmatch(r"  [+-]\d\.\d{3}  ('.*') ~ ('.*')", line)
    assert match, line
    assert (eval(match.group(1)), eval(match.group(2))) in quickstart.PAIRS  # pylint: disable=eval-used
  # Its figures are one run's, and the README says so right before it.
  text = _readme()
  before = text[:text.index(lines[0])]
  assert "**An example run** (figures from one run, not checked by a test" in (
      before[before.rindex("## The two commands"):])


@pytest.mark.slow
def test_model_in_the_readme_block(python_blocks):
  out = _python_block(python_blocks, "model in the README")
  # [B, T, H]: 2 texts, the preprocessor's seq_length, the tiny model's H.
  assert "README shapes (2, 16, 32) (2, 32)" in out, out


@pytest.mark.slow
def test_classifier_from_the_quickstart_block(quickstart_classifier, world):
  with open(quickstart_classifier / "label_list.json", encoding="utf-8") as f:
    assert json.load(f) == ["news", "reference"]  # the CSV's labels, sorted
  results = _read_results(quickstart_classifier / "eval_results.txt")
  assert {"eval_accuracy", "eval_loss", "global_step"} <= set(results)
  with open(quickstart_classifier / "test_results.tsv", encoding="utf-8") as f:
    assert len(f.read().splitlines()) == 6  # one line per CSV row
  assert os.listdir(world / "out" / "my_task_serving") == ["1"]


@pytest.mark.slow
def test_query_the_classifier_block(python_blocks):
  out = _python_block(python_blocks, "query the classifier")
  assert "labels ['news', 'reference']" in out, out
  assert "sums [1.0, 1.0]" in out, out
  # Each text printed with one probability per label.
  assert len(re.findall(r"\{'news': [\d.e-]+, 'reference': [\d.e-]+\}",
                        out)) == 2, out


@pytest.mark.slow
def test_model_block(python_blocks):
  out = _python_block(python_blocks, "model")
  assert "shapes (3, 5, 32) (3, 32)" in out, out
  assert "'mlm_logits'" in out and "'next_sentence_logits'" in out, out


@pytest.mark.slow
def test_tokenizer_block_gives_the_ids_it_shows(python_blocks):
  block = _block("tokenizer")
  shown = re.search(r'tokenizer\.tokenize\(tf\.constant\(\["Héllo, world!"\]\)\)'
                    r" +# int64 \[B, \(wordpieces\)\]: (\[\[[\d, ]+\]\])", block)
  assert shown, "the tokenize line or its ids comment changed"
  out = _python_block(python_blocks, "tokenizer")
  assert f"ids {shown.group(1)}" in out, out


@pytest.mark.slow
def test_word_alignment_block_gives_what_its_comments_show(python_blocks):
  # The original README's snippet, with BERT's uncased vocab: its two
  # closing comments are what it computes.
  shown = re.findall(r"^# (bert_tokens|orig_to_tok_map) == (.*)$",
                     _block("word alignment"), re.M)
  assert [name for name, _ in shown] == ["bert_tokens", "orig_to_tok_map"]
  out = _python_block(python_blocks, "word alignment")
  for name, value in shown:
    printed = re.search(rf"^{name} == (.*)$", out, re.M)
    assert printed and eval(printed.group(1)) == eval(value), out  # pylint: disable=eval-used


@pytest.mark.slow
def test_learn_vocab_block(world):
  _run_sh("learn_vocab", world)
  with open(world / "out" / "vocab.txt", encoding="utf-8") as f:
    vocab = f.read().splitlines()
  assert vocab[:2] == ["[PAD]", "[unused0]"] and vocab[100:104] == [
      "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  assert "fox" in vocab


@pytest.mark.slow
def test_create_pretraining_data_block(world):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  _run_sh("create_pretraining_data", world)
  records = list(tf.data.TFRecordDataset(
      str(world / "out" / "pretrain.tfrecord")).as_numpy_iterator())
  assert records
  example = tf.io.parse_single_example(
      records[0], testing.original_feature_spec(128, 20))
  assert example["input_ids"].numpy()[0] == 101  # [CLS]


@pytest.mark.slow
def test_create_pretraining_data_beam_block(world):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  _run_sh("create_pretraining_data_beam", world)
  shards = sorted(os.listdir(world / "out" / "beam"))
  assert shards == ["pretrain-00000-of-00002", "pretrain-00001-of-00002"]
  records = list(tf.data.TFRecordDataset(
      [str(world / "out" / "beam" / s) for s in shards]).as_numpy_iterator())
  assert records
  example = tf.io.parse_single_example(
      records[0], testing.original_feature_spec(128, 20))
  assert example["input_ids"].numpy()[0] == 101  # [CLS]


@pytest.mark.slow
def test_pretraining_block(world, pretrained):
  del pretrained
  results = _read_results(world / "out" / "pretraining" / "eval_results.txt")
  assert results["global_step"] == "4"
  assert {"masked_lm_accuracy", "next_sentence_accuracy"} <= set(results)


@pytest.mark.slow
def test_modern_recipe_block(world):
  """FULL-SENTENCES records, dynamic masks at 30%, no NSP head."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  _run_sh("modern recipe", world)
  records = list(tf.data.TFRecordDataset(
      str(world / "out" / "pydocs_full.tfrecord")).as_numpy_iterator())
  example = tf.io.parse_single_example(
      records[0], testing.original_feature_spec(128, 20))
  assert not example["segment_ids"].numpy().any()
  out = world / "out" / "pretraining_modern"
  results = _read_results(out / "eval_results.txt")
  assert results["global_step"] == "4"
  assert sorted(results) == ["global_step", "loss", "masked_lm_accuracy",
                             "masked_lm_loss"]
  flags = json.load(open(out / "flags.json"))
  assert flags["masking"] == "dynamic" and flags["masked_lm_prob"] == 0.3


@pytest.mark.slow
def test_glue_block(glue_run):
  results = _read_results(glue_run / "eval_results.txt")
  assert {"eval_accuracy", "eval_f1", "eval_loss", "global_step"} <= set(results)


def test_packed_rows_and_gpu_step_blocks_flags(world):
  (command,) = _check_flags("packed rows", world)
  assert "--pack_sequences" in command
  assert "--next_sentence_prediction=false" in command
  (command,) = _check_flags("gpu step", world)
  assert "--pack" in command and "--fused_attention" in command


def test_classifier_block_flags(world):
  (command,) = _check_flags("classifier", world)
  assert "--do_predict" in command and "--export_dir=" in command


def test_multi_label_classifier_block_flags(world):
  (command,) = _check_flags("multi-label classifier", world)
  assert "--task_type=multi_label" in command and "--export_dir=" in command


def test_long_documents_block_flags(world):
  make, run = _check_flags("long documents", world)
  # run_classifier reads the files the generator writes.
  out_dir = re.search(r"--out_dir=(\S+)", make).group(1)
  assert f"--task_data_dir={out_dir} " in run and "--doc_stride=" in run


def test_long_document_benchmark_block_flags(world):
  (command,) = _check_flags("long document benchmark", world)
  assert "--work_dir=" in command
  (command,) = _check_flags("long document benchmark at 128", world)
  assert "--size=bert_tiny" in command and "--max_seq_length=128" in command


def test_sentence_embeddings_block_flags(world):
  make, run, export = _check_flags("sentence embeddings", world)
  # run_embedding reads the generator's files; the export reads its run.
  out_dir = re.search(r"--out_dir=(\S+)", make).group(1)
  output_dir = re.search(r"--output_dir=(\S+)", run).group(1)
  assert f"--task_data_dir={out_dir} " in run and "--export_dir=" in run
  assert f"--init_checkpoint={output_dir} " in export
  assert "--format=sentence_transformers" in export


def test_reranker_benchmark_block_flags(world):
  (command,) = _check_flags("reranker benchmark", world)
  assert "--losses=bce,listwise" in command


def test_embedding_benchmark_block_flags(world):
  (command,) = _check_flags("embedding benchmark", world)
  assert "--work_dir=" in command


def test_search_block_flags(world):
  make, run = _check_flags("hard negatives", world)
  # run_embedding mines the generator's hard task.
  out_dir = re.search(r"--out_dir=(\S+)", make).group(1)
  assert "--next_sentence" in make
  assert f"--task_data_dir={out_dir} " in run
  assert "--mine_hard_negatives=3" in run


def test_large_batches_block_flags(world):
  cached, replicas = _check_flags("large batches", world)
  # GradCache on one device, then on two replicas sharing negatives.
  for run in (cached, replicas):
    assert "--train_batch_size=256 --mini_batch_size=32" in run, run
  assert "--distribution_strategy=mirrored" in replicas


def test_reranker_block_flags(world):
  export, run, hf = _check_flags("reranker", world)
  # The reranker reads the hard task and the retriever the first command
  # exported; export_checkpoint reads its best checkpoint.
  retriever = re.search(r"--export_dir=(\S+)", export).group(1)
  output_dir = re.search(r"--output_dir=(\S+)", run).group(1)
  assert f"--retriever={retriever} " in run and "--export_dir=" in run
  assert re.search(r"--task_data_dir=\S*/hard_pairs ", run), run
  assert f"--init_checkpoint={output_dir}/best " in hf


def test_python_blocks_run_elsewhere_are_run_there():
  # docs/search.md's retrieve-then-rerank block needs a retriever export
  # and a reranker export: tests/reranker_test.py runs its lines, read
  # from the page, on its tiny run's exports.
  from tests import reranker_test  # pylint: disable=g-import-not-at-top
  block = _block("retrieve then rerank (run by reranker_test)")
  assert block == reranker_test.retrieve_then_rerank_block()
  assert callable(reranker_test.test_retrieve_then_rerank_block_runs)


def test_ner_block_flags(world):
  (command,) = _check_flags("ner", world)
  assert "--do_eval" in command and "--export_dir=" in command


@pytest.mark.slow
def test_ner_from_the_quickstart_model_block(world, pretrained):
  del pretrained
  _run_sh("ner from the quickstart", world)
  results = _read_results(
      world / "out" / "pydocs_ner_out" / "eval_results.txt")
  assert "eval_f1_FUNC" in results or "eval_f1" in results


def test_squad_block_flags(world):
  run, evaluate = _check_flags("squad", world)
  assert "--version_2_with_negative" in run and "--export_dir=" in run
  # squad_evaluate reads the files run_squad writes into its --output_dir.
  output_dir = re.search(r"--output_dir=(\S+)", run).group(1).rstrip("/")
  assert f"{output_dir}/predictions.json" in evaluate
  assert f"--na-prob-file={output_dir}/null_odds.json" in evaluate


@pytest.mark.slow
def test_squad_from_the_quickstart_model_block(world, pretrained):
  del pretrained
  _run_sh("squad from the quickstart", world)
  assert os.path.exists(world / "out" / "pydocs_qa_out" / "predictions.json")


@pytest.mark.slow
def test_convert_checkpoint_block(bert_base):
  assert {"bert_config.json", "vocab.txt", "checkpoint",
          "bert_model.ckpt.index"} <= set(os.listdir(bert_base))


@pytest.mark.slow
def test_extract_features_block(world, bert_base):
  del bert_base
  _run_sh("extract_features", world)
  with open(world / "out" / "features.jsonl", encoding="utf-8") as f:
    lines = [json.loads(line) for line in f]
  assert [line["linex_index"] for line in lines] == [0, 1, 2]
  assert [layer["index"] for layer in lines[0]["features"][0]["layers"]] == [
      -1, -2]  # --layers, substituted for the 2-layer model


@pytest.mark.slow
def test_tfhub_loading_block(hub_export, python_blocks):
  assert sorted(os.listdir(hub_export)) == ["encoder", "preprocessor"]
  out = _python_block(python_blocks, "tfhub loading")
  assert "pooled (None, 32)" in out, out


@pytest.mark.slow
def test_export_saved_model_block(serving_export):
  assert os.path.exists(serving_export / "saved_model.pb")


@pytest.mark.slow
def test_serving_export_in_python_block(python_blocks):
  out = _python_block(python_blocks, "serving export in Python")
  assert "probabilities (1, 3)" in out, out


@pytest.mark.slow
def test_curl_request_and_response_match_the_export(serving_export):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import
  path = serving_export
  command = _commands(_block("curl (checked against the export)"))[0]
  assert command.startswith("curl ") and ":predict" in command
  body = json.loads(re.search(r"-d '(.*)'$", command).group(1))
  signature = tf.saved_model.load(str(path)).signatures[body["signature_name"]]
  inputs = {k: tf.constant(v) for k, v in body["inputs"].items()}
  outputs = signature(**inputs)
  response = _block("curl's response (checked)")
  shown = set(re.findall(r'"(\w+)": \[', response))
  assert shown == set(outputs), (shown, set(outputs))
  # The mask shown is the one this request gets.
  mask = re.search(r'"input_mask": (\[\[.*?\]\])', response).group(1)
  assert outputs["input_mask"].numpy().tolist() == json.loads(mask)


@pytest.mark.slow
def test_saved_model_cli_block(world, serving_export):
  del serving_export
  out = _run_sh("saved_model_cli", world)
  assert "Result for output key pooled_output" in out, out[-2000:]


def test_quickstart_figures_that_follow_from_the_code():
  """The quickstart figures of the README and docs/quickstart.md that do not
  depend on one run (the example run's rates, counts and accuracies are
  marked as such)."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  from official_bert import quickstart  # pylint: disable=g-import-not-at-top,unused-import
  from official_bert.modeling import pretrainer  # pylint: disable=g-import-not-at-top
  text = _readme()
  defaults = {name: flags.FLAGS[name].default
              for name in ("num_train_steps", "model", "max_seq_length")}
  run = re.search(r"pretraining ([\d,]+) steps of a (\d+)-layer H(\d+) BERT "
                  r"\(([\d,]+) parameters\).*?vocab: ([\d,]+) tokens", text,
                  flags=re.S)
  steps, layers, hidden, params, vocab = (
      int(g.replace(",", "")) for g in run.groups())
  assert steps == defaults["num_train_steps"]
  assert f"L{layers}_H{hidden}_A" in defaults["model"]
  page = _read("docs/quickstart.md")
  assert f"(`{defaults['model']}`)" in page
  heads = int(defaults["model"].rsplit("_A", 1)[1])
  # The parameter count of that model with the run's vocabulary.
  config = configs.BertConfig(
      vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
      num_attention_heads=heads, intermediate_size=4 * hidden,
      max_position_embeddings=max(512, defaults["max_seq_length"]))
  with open(os.path.join(testing.ROOT, "official_bert", "quickstart.py")) as f:
    source = f.read()
  assert "intermediate_size=4 * hidden" in source
  assert "max_position_embeddings=max(512, FLAGS.max_seq_length)" in source
  model = pretrainer.BertPretrainer.from_bert_config(config)
  model(testing.random_inputs(vocab=vocab) | {
      "masked_lm_positions": testing.random_inputs()["input_mask"]})
  assert model.count_params() == params
  # "saved every 10% of the run"
  assert "saved every 10% of the run" in page.replace("\n", " ")
  assert "every = -(-steps // 10)" in source
  # "runs a shortened variant (60 documents, 30 steps)"
  short = re.search(r"shortened variant \((\d+) documents, (\d+) steps\)",
                    page.replace("\n", " "))
  with open(os.path.join(testing.ROOT, "tests", "quickstart_test.py")) as f:
    quickstart_short = re.search(r"^SHORT = \[(.*?)\]", f.read(),
                                 flags=re.S | re.M).group(1)
  assert f'"--max_documents={short.group(1)}"' in quickstart_short
  assert f'"--num_train_steps={short.group(2)}"' in quickstart_short


# ---- docs/checkpoints.md: export_checkpoint ----

def _json(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


@pytest.mark.slow
def test_export_checkpoint_huggingface_block(world, exports):
  del exports
  out = world / "out" / "bert_hf"
  assert {"model.safetensors", "config.json", "vocab.txt",
          "tokenizer_config.json", "special_tokens_map.json"} <= set(
              os.listdir(out))
  assert _json(out / "config.json")["architectures"] == ["BertForPreTraining"]


def _original_tensor_count(layers):
  """How many tensors google-research/bert names a BertForPreTraining of
  `layers` layers has (checkpoint_names' table; H does not matter)."""
  from official_bert.modeling import pretrainer  # pylint: disable=g-import-not-at-top
  from official_bert.training import checkpoint_names  # pylint: disable=g-import-not-at-top
  model = pretrainer.BertPretrainer.from_bert_config(
      testing.tiny_config(num_hidden_layers=layers))
  model(testing.random_inputs() | {
      "masked_lm_positions": testing.random_inputs()["input_mask"]})
  return len(checkpoint_names.original_names(model))


@pytest.mark.slow
def test_export_checkpoint_output_block(world, exports):
  """The line shown is the huggingface block's last line, but for its two
  figures (tensor count, seconds), which are from a BERT-Base export: the
  count is checked against the code for BERT-Base's layers, the seconds
  only for their form."""
  shown = _substitute(_block("export_checkpoint's output (checked)"),
                      world).strip()
  printed = exports["export_checkpoint huggingface"].strip().splitlines()[-1]
  figures = r"(\d+) tensors; (\d+\.\d) s"
  shown_count, _ = re.search(figures + "$", shown).groups()
  printed_count, _ = re.search(figures + "$", printed).groups()
  assert re.sub(figures, "", shown) == re.sub(figures, "", printed), (
      shown, printed)
  page = _read("docs/checkpoints.md")
  before = page[:page.index("```\nWrote /tmp/bert_hf")]
  assert "this line is from a BERT-Base export" in (
      before[before.rindex("Hugging Face:"):].replace("\n", " "))
  base_layers = int(re.search(r"uncased_L-(\d+)_H-768", page).group(1))
  assert int(printed_count) == _original_tensor_count(
      _tiny_config().num_hidden_layers)
  assert int(shown_count) == _original_tensor_count(base_layers)


@pytest.mark.slow
def test_export_checkpoint_from_the_glue_run_block(world, exports, glue_run):
  del exports
  config = _json(world / "out" / "mrpc_hf" / "config.json")
  assert config["architectures"] == ["BertForSequenceClassification"]
  labels = _json(glue_run / "label_list.json")
  assert [config["id2label"][str(i)] for i in range(len(labels))] == labels


@pytest.mark.slow
def test_export_checkpoint_sentence_transformers_block(world, exports):
  out = world / "out" / "bert_st"
  # The pretraining heads are left out, and the program says so.
  assert ("note: the pretraining head is not part of a sentence-transformers "
          "model; its encoder is exported") in exports[
              "export_checkpoint sentence_transformers"]
  assert [m["type"].rsplit(".", 1)[1] for m in _json(
      out / "modules.json")] == ["Transformer", "Pooling", "Normalize"]
  assert _json(out / "1_Pooling" / "config.json")["pooling_mode_mean_tokens"]
  assert _json(out / "config.json")["architectures"] == ["BertModel"]


@pytest.mark.slow
def test_export_checkpoint_google_tf1_block(world, exports):
  del exports
  assert {"bert_model.ckpt.index", "bert_config.json", "vocab.txt"} <= set(
      os.listdir(world / "out" / "bert_tf1"))


@pytest.mark.slow
def test_transformers_loading_block(python_blocks):
  out = _python_block(python_blocks, "transformers loading")
  assert re.search(r"^hf class BertForPreTraining \(1, 30522\) \(1, 2\)$",
                   out, flags=re.M), out
  word = re.search(r"^hf word '(.*)'$", out, flags=re.M).group(1)
  # The block printed the decoded prediction, a word of the vocabulary.
  assert out.splitlines().index(word) < out.splitlines().index(
      f"hf word '{word}'")
  with open(testing.VOCAB, encoding="utf-8") as f:
    assert word in f.read().splitlines(), word


@pytest.mark.slow
def test_pipeline_loading_block(python_blocks, glue_run):
  labels = _json(glue_run / "label_list.json")
  out = _python_block(python_blocks, "pipeline loading")
  assert f"pipeline class BertForSequenceClassification {labels}" in out, out
  printed = re.search(r"^\[\{'label': '(.*)', 'score': ([\d.e-]+)\}\]$", out,
                      flags=re.M)
  assert printed, out
  assert printed.group(1) in labels and 0 <= float(printed.group(2)) <= 1


@pytest.mark.slow
def test_sentence_transformers_loading_block(python_blocks):
  out = _python_block(python_blocks, "sentence-transformers loading")
  # [2 sentences, the tiny model's H], and their cosine (unit vectors).
  printed = re.search(r"^\(2, 32\) (-?[\d.e-]+)$", out, flags=re.M)
  assert printed and -1 <= float(printed.group(1)) <= 1, out
  assert "st norms [1.0, 1.0]" in out, out  # --normalize_embedding
  assert "st modules ['Transformer', 'Pooling', 'Normalize']" in out, out


@pytest.mark.slow
def test_list_variables_block(python_blocks):
  out = _python_block(python_blocks, "list_variables")
  assert "tf1 names True" in out and "tf1 weights True" in out, out
  first = eval(re.search(r"^tf1 first (.*)$", out, flags=re.M).group(1))  # pylint: disable=eval-used
  assert [name for name, _ in first] == [
      "bert/embeddings/LayerNorm/beta", "bert/embeddings/LayerNorm/gamma",
      "bert/embeddings/position_embeddings"]
  # The block printed the release's first three names and shapes.
  assert "\n".join(f"{name} {shape}" for name, shape in first) in out, out


def test_quickstart_export_block_is_what_quickstart_test_runs():
  """The block is the command tests/quickstart_test.py runs, less the
  test's --work_dir (a tmp dir) and its shortening flags (SHORT)."""
  import ast  # pylint: disable=g-import-not-at-top
  from absl import flags  # pylint: disable=g-import-not-at-top
  from official_bert import quickstart  # pylint: disable=g-import-not-at-top,unused-import
  path = os.path.join(testing.ROOT, "tests", "quickstart_test.py")
  with open(path, encoding="utf-8") as f:
    source = f.read()
  commands = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.List) and any(
        isinstance(e, ast.Constant) and e.value == "--export_huggingface"
        for e in node.elts):
      words = []
      for e in node.elts:
        if isinstance(e, ast.Starred) and ast.unparse(e) == "*SHORT":
          continue
        if ast.unparse(e) == "f'--work_dir={work}'":
          continue
        assert isinstance(e, ast.Constant), ast.unparse(e)
        words.append(e.value)
      commands.append(words)
  # The rerun that exports, and the third run that checks every stage
  # (that export's included) is reused.
  assert commands == 2 * [["-m", "official_bert.quickstart",
                           "--export_huggingface"]], commands
  assert "testing.run_cli([\"-m\", \"official_bert.quickstart\"" in source
  block = _block("quickstart --export_huggingface (checked)").strip()
  assert block == "python " + " ".join(commands[0])
  # "writes runs/quickstart/huggingface/": the default --work_dir's, which
  # the test checks holds a BertForPreTraining export.
  page = _read("docs/checkpoints.md")
  assert (f"writes `{flags.FLAGS['work_dir'].default}/huggingface/`"
          in page), "the quickstart's default --work_dir changed"
  assert 'hf_dir = os.path.join(work, "huggingface")' in source
  assert '["architectures"] == ["BertForPreTraining"]' in source


# ---- docs/pretraining-data.md: running on a cluster ----

DASK_TEST = os.path.join(testing.ROOT, "tests",
                         "create_pretraining_data_beam_dask_test.py")
BEAM_PROGRAM = os.path.join(testing.ROOT, "tfrecords",
                            "create_pretraining_data_beam.py")


def _split(command):
  import shlex  # pylint: disable=g-import-not-at-top
  words = shlex.split(command, comments=True)
  return words[:-1] if words and words[-1] == "&" else words


def _beam_commands(name):
  """The block's `python -m tfrecords.create_pretraining_data_beam`
  commands: [(absl flags before `--`, Beam options after)]."""
  found = []
  for command in _commands(_block(name)):
    words = _split(command)
    if words[1:3] == ["-m", "tfrecords.create_pretraining_data_beam"]:
      assert words[0].endswith("python"), command
      rest = words[3:] + (["--"] if "--" not in words else [])
      cut = rest.index("--")
      found.append((rest[:cut], rest[cut + 1:]))
  return found


@functools.lru_cache(maxsize=None)
def _program_flags():
  """The flags `--helpfull` of the Beam program lists (run in this
  process)."""
  proc = testing.run_program("tfrecords.create_pretraining_data_beam",
                             ["--helpfull"], check=False, merge_stderr=True)
  names = set(re.findall(r"^\s+--(?:\[no\])?(\w+):", proc.stdout, flags=re.M))
  assert {"input_file", "runner", "num_output_shards"} <= names, proc.stdout
  return names


def _unknown_beam_options(options):
  """The options no PipelineOptions class defines (exact names, as Beam
  parses them: no abbreviations)."""
  from apache_beam.options import pipeline_options  # pylint: disable=g-import-not-at-top
  parsers = []
  pipeline_options.PipelineOptions([]).get_all_options(
      add_extra_args_fn=parsers.append)
  try:
    _, unknown = parsers[0].parse_known_args(options)
  except SystemExit:
    return options
  return unknown


def _ast_call_args(tree, function):
  """[(call node, its parents)] of every call of `function` in `tree`."""
  import ast  # pylint: disable=g-import-not-at-top
  parents = {}
  for node in ast.walk(tree):
    for child in ast.iter_child_nodes(node):
      parents[child] = node
  calls = []
  for node in ast.walk(tree):
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and
        node.func.id == function):
      chain, up = [], node
      while up in parents:
        up = parents[up]
        chain.append(up)
      calls.append((node, chain))
  return calls


def test_dask_recipe_is_what_the_dask_test_runs():
  """The recipe's scheduler and worker command lines are the ones the dask
  test starts (its free port and address in for the recipe's), as many
  workers; its pipeline's --runner and options after `--` are the test's
  run's, the client address being the scheduler's."""
  import ast  # pylint: disable=g-import-not-at-top
  import apache_beam.runners.dask.dask_runner  # pylint: disable=g-import-not-at-top,unused-import  (its DaskOptions)
  commands = [_split(c) for c in _commands(_block("dask recipe (checked)"))]
  dask = [words[1:] for words in commands
          if words and words[0].endswith("/dask")]
  scheduler = [words for words in dask if words[0] == "scheduler"]
  workers = [words for words in dask if words[0] == "worker"]
  assert len(scheduler) == 1 and len(workers) + 1 == len(dask), dask
  port = scheduler[0][scheduler[0].index("--port") + 1]
  with open(DASK_TEST, encoding="utf-8") as f:
    tree = ast.parse(f.read())
  assigned = [node.value for node in ast.walk(tree)
              if isinstance(node, ast.Assign) and
              ast.unparse(node.targets[0]) == "address"]
  assert len(assigned) == 1 and isinstance(assigned[0], ast.JoinedStr)
  prefix = assigned[0].values[0].value  # f"tcp://127.0.0.1:{_free_port()}"
  assert ast.unparse(assigned[0].values[1].value) == "_free_port()"
  address = prefix + port
  started = []
  for call, parents in _ast_call_args(tree, "_start"):
    words = eval(compile(ast.Expression(call.args[0]), DASK_TEST, "eval"),  # pylint: disable=eval-used
                 {"address": address})
    loops = [p for p in parents if isinstance(p, ast.For)]
    times = len(eval(ast.unparse(loops[0].iter))) if loops else 1  # pylint: disable=eval-used
    started += [words] * times
  assert started == scheduler + workers, (started, scheduler + workers)

  (before, after), = _beam_commands("dask recipe (checked)")
  runs = []
  for call, _ in _ast_call_args(tree, "_run"):
    if "'--runner=DaskRunner'" in ast.unparse(call.args[0]):
      options = eval(compile(ast.Expression(call.args[1]), DASK_TEST, "eval"),  # pylint: disable=eval-used
                     {"address": address})
      runs.append(options)
  assert len(runs) == 2, runs  # the records test and the failure test
  shown = dict(option.split("=", 1) for option in after)
  assert "--runner=DaskRunner" in before
  for options in runs:
    test = dict(option.split("=", 1) for option in options)
    assert set(test) == set(shown), (test, shown)
    assert test["--dask_client_address"] == shown[
        "--dask_client_address"] == address
  assert not _unknown_beam_options(after), after
  assert {flag.split("=", 1)[0][2:] for flag in before} <= _program_flags()
  # The pinned dask of the install line is requirements-test.txt's.
  pin = re.search(r'"(dask\[distributed\]==[\d.]+)"',
                  _block("dask recipe (checked)")).group(1)
  with open(os.path.join(testing.ROOT, "requirements-test.txt"),
            encoding="utf-8") as f:
    assert pin in [line.split("#")[0].strip() for line in f], pin


def test_cluster_blocks_use_flags_and_options_that_exist():
  """The Dataflow and Flink/Spark blocks cannot run here: every flag before
  `--` is the program's, every option after it Beam's, and what they stage
  is this project's pyproject.toml or the wheel it builds."""
  import tomllib  # pylint: disable=g-import-not-at-top
  program = _program_flags()
  with open(os.path.join(testing.ROOT, "pyproject.toml"), "rb") as f:
    project = tomllib.load(f)["project"]
  wheel = (f"dist/{project['name'].replace('-', '_')}-{project['version']}"
           "-py3-none-any.whl")
  for name, runner in (("dataflow (checked)", "DataflowRunner"),
                       ("portable runner (checked)", "PortableRunner")):
    commands = _beam_commands(name)
    assert commands, name
    for before, after in commands:
      flags_given = [word for word in before if word != "..."]
      assert f"--runner={runner}" in flags_given, (name, before)
      unknown = [flag for flag in flags_given
                 if not flag.startswith("--") or
                 flag.split("=", 1)[0][2:] not in program]
      assert not unknown, (name, unknown)
      assert after and not _unknown_beam_options(after), (
          name, _unknown_beam_options(after))
      for option in after:
        key, _, value = option.partition("=")
        if key == "--extra_package":
          assert value == wheel, (value, wheel)
        if key == "--setup_file":
          assert value == "$PWD/pyproject.toml", value
  assert "-w dist/" in _block("dataflow (checked)")


def _summary_format():
  """The Beam program's summary line for a runner without metrics, as a
  function of (instances, random_next, shards, output_file, seconds,
  runner): the program's own f-strings, read from its source."""
  import ast  # pylint: disable=g-import-not-at-top
  import types  # pylint: disable=g-import-not-at-top
  with open(BEAM_PROGRAM, encoding="utf-8") as f:
    tree = ast.parse(f.read())
  branch, = [node for node in ast.walk(tree) if isinstance(node, ast.If) and
             ast.unparse(node.test) == "from_metrics"]
  line, = [node.args[0] for node in ast.walk(tree)
           if isinstance(node, ast.Call) and ast.unparse(node.func) == "print"
           and node.args and "] done: wrote " in ast.unparse(node.args[0])]

  def render(instances, random_next, shards, output_file, seconds, runner):
    namespace = {"counts": {"instances": instances,
                            "random_next": random_next},
                 "FLAGS": types.SimpleNamespace(num_output_shards=shards,
                                                output_file=output_file),
                 "seconds": seconds, "runner_name": runner}
    exec(compile(ast.Module(body=branch.orelse, type_ignores=[]),  # pylint: disable=exec-used
                 BEAM_PROGRAM, "exec"), namespace)
    return eval(compile(ast.Expression(line), BEAM_PROGRAM, "eval"),  # pylint: disable=eval-used
                namespace)
  return render


def test_dask_summary_line_is_the_programs_format():
  shown = _block("dask summary line (checked)").strip()
  figures = re.match(
      r"\[create_pretraining_data_beam\] done: wrote ([\d,]+) instances "
      r"\(([\d.]+)% random next\) to (\d+) shard\(s\) of (\S+) in "
      r"([\d.]+) s \([\d,]+ instances/s\) on (\w+);", shown)
  assert figures, shown
  instances = int(figures.group(1).replace(",", ""))
  random_next = [r for r in range(instances + 1)
                 if f"{r / instances:.1%}" == figures.group(2) + "%"]
  assert random_next, figures.group(2)
  seconds = float(figures.group(5))
  render = _summary_format()
  assert shown in {
      render(instances, random_next[0], int(figures.group(3)),
             figures.group(4), s, figures.group(6))
      for s in (seconds - 0.049, seconds, seconds + 0.049)}, (
          shown, render(instances, random_next[0], int(figures.group(3)),
                        figures.group(4), seconds, figures.group(6)))
  # The runner is the recipe's; the shard count the run the page describes.
  assert figures.group(6) == "DaskRunner"
  page = _read("docs/pretraining-data.md").replace("\n", " ")
  assert f"--num_output_shards={figures.group(3)}`" in page


@pytest.mark.slow
def test_dask_summary_figures_are_what_the_job_gives(tmp_path):
  """The instances and random-next share shown, from the lines and flags
  the page names: the in-process CLI on one file gives the pipeline's
  records (as the page says; the dask test checks runner = in-process)."""
  testing.require_shared_data()
  page = _read("docs/pretraining-data.md").replace("\n", " ")
  run = re.search(r"the one from ([\d,]+) lines of `\.\./shared/data/"
                  r"pydocs_corpus\.txt` with `([^`]+)` and BERT's uncased "
                  r"`vocab\.txt`", page)
  assert run, "the sentence before the summary line changed"
  lines = int(run.group(1).replace(",", ""))
  with open(testing.CORPUS, encoding="utf-8") as f:
    text = "".join(f.readline() for _ in range(lines))
  _write(tmp_path / "corpus.txt", text)
  proc = testing.run_cli(
      ["-m", "tfrecords.create_pretraining_data",
       f"--input_file={tmp_path / 'corpus.txt'}",
       f"--output_file={tmp_path / 'out.tfrecord'}",
       f"--vocab_file={testing.VOCAB}", "--num_workers=0",
       *run.group(2).split()], merge_stderr=True)
  printed = re.search(r"done: wrote ([\d,]+ instances \([\d.]+% random "
                      r"next\))", proc.stdout).group(1)
  shown = _block("dask summary line (checked)")
  assert f"done: wrote {printed} to " in shown, (printed, shown)


# ---- docs/domain-adaptation.md ----

def test_domain_adaptation_block_flags(world):
  extend, data, pretrain, classify = _check_flags("domain adaptation", world)
  # Each step reads what the one before it wrote.
  extended = re.search(r"--output_dir=(\S+)", extend).group(1)
  assert f"--vocab_file={extended}/vocab.txt" in data
  records = re.search(r"--output_file=(\S+)", data).group(1)
  assert f"--input_file={records}" in pretrain
  assert f"--init_checkpoint={extended}" in pretrain
  pretrained = re.search(r"--output_dir=(\S+)", pretrain).group(1)
  assert f"--init_checkpoint={pretrained}" in classify
  assert f"--bert_config_file={extended}/bert_config.json" in classify


@pytest.mark.slow
def test_extend_checkpoint_output_block_is_what_the_program_prints(tmp_path):
  """The run the page describes (pydocs, BERT's uncased vocab, its flags),
  on a tiny model with BERT's vocab size: the same two lines but for the
  path and the seconds, and the first words the page lists."""
  testing.require_shared_data()
  from official_bert.modeling import pretrainer  # pylint: disable=g-import-not-at-top
  from official_bert.training import checkpoints  # pylint: disable=g-import-not-at-top
  source = tmp_path / "source"
  model = pretrainer.BertPretrainer.from_bert_config(_tiny_config())
  checkpoints.save_model(model, str(source / "bert_model.ckpt"))
  _write(source / "checkpoint", 'model_checkpoint_path: "bert_model.ckpt"\n')
  _tiny_config().to_json_file(str(source / "bert_config.json"))
  shutil.copy(testing.VOCAB, source / "vocab.txt")
  page = _read("docs/domain-adaptation.md").replace("\n", " ")
  flags = re.search(r"`--max_new_words=2000 "
                    r"--max_position_embeddings=1024`", page)
  assert flags and "`../shared/data/pydocs_corpus.txt`" in page
  proc = testing.run_cli([
      "-m", "official_bert.extend_checkpoint", f"--init_checkpoint={source}",
      f"--domain_corpus={testing.CORPUS}", "--max_new_words=2000",
      "--max_position_embeddings=1024", f"--output_dir={tmp_path / 'out'}"])
  printed = [line for line in proc.stdout.splitlines()
             if line.startswith(("learned ", "extend_checkpoint: "))]
  shown = _block("extend_checkpoint's output (checked)").splitlines()
  def plain(line):
    line = line.replace(str(tmp_path / "out"), "/tmp/bert_domain")
    return re.sub(r" in [\d.]+ s$", " in S s", line)
  assert [plain(l) for l in printed] == [plain(l) for l in shown], printed
  first = re.search(r"most WordPieces saved first: `([^`]*) \.\.\.`", page)
  words = _json(tmp_path / "out" / "extend_info.json")["new_words"]
  assert first and words[:len(first.group(1).split())] == first.group(
      1).split(), words[:20]


# ---- docs/distillation.md ----

def test_student_block_flags(world):
  (command,) = _check_flags("student", world)
  assert "--student_layers=" in command and "--init_checkpoint=" in command


def test_distilled_student_block_flags(world):
  (command,) = _check_flags("distilled student", world)
  assert "--teacher=" in command and "--student_layers=" in command


def test_distillation_benchmark_block_flags(world):
  (command,) = _check_flags("distillation benchmark", world)
  assert "--task=hidden_topic" in command and "--distill_examples=" in command


def test_multi_label_distillation_benchmark_block_flags(world):
  (command,) = _check_flags("multi-label distillation benchmark", world)
  assert "--task=topics" in command and "--distill_examples=" in command


def test_mining_gain_benchmark_block_flags(world):
  (command,) = _check_flags("mining gain benchmark", world)
  assert "--mine_hard_negatives=3" in command and "--next_sentence" in command


def test_embedding_distillation_benchmark_block_flags(world):
  (command,) = _check_flags("embedding distillation benchmark", world)
  assert "--student_layers=0,2,4" in command and "--next_sentence" in command


def test_distilled_embedding_student_block_flags(world):
  (command,) = _check_flags("distilled embedding student", world)
  assert "--teacher=" in command and "--distill_data=" in command


@pytest.mark.slow
def test_int8_client_block(python_blocks):
  out = _python_block(python_blocks, "int8 client")
  assert "client ids equal True" in out and "int8 logits (2, 2)" in out, out
