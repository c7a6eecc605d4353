"""The flags of google-research/bert's create_pretraining_data.py, defined once.

Both programs that write pretraining TFRecords (the multi-process job and its
Apache Beam twin) take the original's flags with the same names, meanings and
defaults; each calls `define_flags` from its `__main__` block, so importing a
module never defines flags.
"""

from absl import flags


def define_flags(output_file_help, num_output_shards_help):
  """The original's flags plus the sharding/compression/window ones.

  Args:
    output_file_help: what --output_file means for the calling program.
    num_output_shards_help: likewise for --num_output_shards.
  """
  flags.DEFINE_string("input_file", None,
                      "Input raw text file (or comma-separated list of files/globs).")
  flags.DEFINE_string("output_file", None, output_file_help)
  flags.DEFINE_string("vocab_file", None,
                      "The vocabulary file that the BERT model was trained on.")
  flags.DEFINE_bool("do_lower_case", True,
                    "Whether to lower case the input text. Should be True for "
                    "uncased models and False for cased models.")
  flags.DEFINE_bool("do_whole_word_mask", False,
                    "Whether to use whole word masking rather than per-WordPiece masking.")
  flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.")
  flags.DEFINE_integer("max_predictions_per_seq", 20,
                       "Maximum number of masked LM predictions per sequence.")
  flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.")
  flags.DEFINE_integer("dupe_factor", 10,
                       "Number of times to duplicate the input data (with different masks).")
  flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.")
  flags.DEFINE_float("short_seq_prob", 0.1,
                     "Probability of creating sequences which are shorter than the "
                     "maximum length.")
  # New in this implementation.
  flags.DEFINE_bool("next_sentence_prediction", True,
                    "False: RoBERTa's FULL-SENTENCES instances for training "
                    "without NSP: whole sentences packed up to "
                    "max_seq_length - 2 tokens, crossing documents with a "
                    "[SEP] between them, one segment, next_sentence_labels "
                    "written as 0.")
  flags.DEFINE_bool("pack_sequences", False,
                    "Write packed rows: the instances of a batch of the job "
                    "(masked as without it) placed, longest first, into "
                    "rows of max_seq_length with room for them (at most 8 a "
                    "row; max_predictions_per_seq + 7 masked slots), with a "
                    "sequence_ids feature; masked-LM only, so it needs "
                    "--next_sentence_prediction=false. run_pretraining reads "
                    "them as they are.")
  flags.DEFINE_integer("num_output_shards", 1, num_output_shards_help)
  flags.DEFINE_enum("compression", "none", ["none", "GZIP"],
                    "Compression of the output TFRecord files.")
  flags.DEFINE_integer("window_tokens", 1 << 18,
                       "Documents are processed in windows of about this many "
                       "tokens (at least 16 documents); the random next segment "
                       "comes from the same window. Changes the output.")
