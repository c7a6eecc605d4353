"""GLUE tasks by name read from files in each download's own layout.

Each fixture below is written as the GLUE (or XNLI) download writes that
file: its header row (or none: CoLA's train/dev), its columns, a `"` inside a
text that must stay a plain character (the files are unquoted TSV), labels
in the file's own spelling. A wrong column position, a header read as an
example, csv's default quoting, or a wrong file name fails here."""

import os

import pytest

from official_bert.tasks.classification import glue

Q = '"'  # A quote inside a text: GLUE files are not quoted.

FILES = {
    "CoLA": {
        "train.tsv": f"gj04\t1\t\tOur friends won't buy this {Q}analysis{Q}.\n"
                     "gj04\t0\t*\tOne more pseudo generalization and I'm giving up.\n",
        "dev.tsv": "bc01\t0\t*\tThe more we study verbs, the crazier they get them.\n",
        "test.tsv": "index\tsentence\n0\tBill whistled past the house.\n",
    },
    "MNLI": {
        "train.tsv": "index\tpromptID\tpairID\tgenre\ts1bp\ts2bp\ts1p\ts2p\t"
                     "sentence1\tsentence2\tlabel1\tgold_label\n"
                     f"0\t31193\t31193n\tgovernment\t(\t(\t(\t(\tConceptually "
                     f"cream {Q}skimming{Q}.\tProduct and geography.\tneutral\tneutral\n",
        "dev_matched.tsv": "index\tpromptID\tpairID\tgenre\ts1bp\ts2bp\ts1p\t"
                           "s2p\tsentence1\tsentence2\tlabel1\tlabel2\t"
                           "label3\tlabel4\tlabel5\tgold_label\n"
                           "0\t63735\t63735n\tslate\t(\t(\t(\t(\tThe new "
                           "rights.\tEveryone loves them.\tneutral\tentailment"
                           "\tneutral\tneutral\tneutral\tneutral\n",
        "dev_mismatched.tsv": "index\tpromptID\tpairID\tgenre\ts1bp\ts2bp\t"
                              "s1p\ts2p\tsentence1\tsentence2\tlabel1\t"
                              "gold_label\n0\t1\t1c\tletters\t(\t(\t(\t(\t"
                              "Mismatched premise.\tHypothesis.\tcontradiction"
                              "\tcontradiction\n",
        "test_matched.tsv": "index\tpromptID\tpairID\tgenre\ts1bp\ts2bp\t"
                            "s1p\ts2p\tsentence1\tsentence2\n0\t31\t31\t"
                            "slate\t(\t(\t(\t(\tTest premise.\tTest hypo.\n",
        "test_mismatched.tsv": "index\tpromptID\tpairID\tgenre\ts1bp\t"
                               "s2bp\ts1p\ts2p\tsentence1\tsentence2\n0\t9\t"
                               "9\tletters\t(\t(\t(\t(\tMismatched test."
                               "\tIts hypothesis.\n",
    },
    "MRPC": {
        "train.tsv": "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                     f"1\t702876\t702977\tAmrozi accused his brother {Q}the "
                     f"witness{Q}.\tReferring to him as only {Q}the witness{Q}.\n"
                     "0\t2108705\t2108831\tYucaipa owned Dominick's.\tYucaipa "
                     "bought Dominick's.\n",
        "dev.tsv": "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                   f"1\t1355540\t1355592\t{Q}He said{Q} the pie.\tThe "
                   "foodservice pie business.\n"
                   f"0\t1\t2\t{Q}Unbalanced.\tSecond.\n",
        "test.tsv": "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                    "1\t1089874\t1089925\tPCCW's chief operating officer.\t"
                    "Current Chief Operating Officer.\n",
    },
    "XNLI": {
        "multinli/multinli.train.zh.tsv":
            "premise\thypo\tlabel\n你好 世界\t世界\tcontradictory\n"
            "他 来 了\t他 在\tentailment\n",
        "xnli.dev.tsv": "language\tgold_label\tsentence1_binary_parse\t"
                        "sentence2_binary_parse\tsentence1_parse\t"
                        "sentence2_parse\tsentence1\tsentence2\tpromptID\t"
                        "pairID\tgenre\tlabel1\n"
                        "en\tneutral\t(\t(\t(\t(\tEnglish one.\tEnglish two.\t"
                        "1\t1\tslate\tneutral\n"
                        "zh\tcontradiction\t(\t(\t(\t(\t他说，妈妈，我回来了。\t"
                        "他没说一句话。\t1\t1\tfacetoface\tcontradiction\n",
        "xnli.test.tsv": "language\tgold_label\tsentence1_binary_parse\t"
                         "sentence2_binary_parse\tsentence1_parse\t"
                         "sentence2_parse\tsentence1\tsentence2\tpromptID\t"
                         "pairID\tgenre\tlabel1\n"
                         "zh\tentailment\t(\t(\t(\t(\t测试前提。\t测试假设。\t"
                         "2\t2\tslate\tentailment\n"
                         "de\tneutral\t(\t(\t(\t(\tEin Test.\tZwei.\t"
                         "3\t3\tslate\tneutral\n",
    },
    "SST-2": {
        "train.tsv": f"sentence\tlabel\nhide new secretions {Q} \t0\n"
                     "contains no wit \t0\n",
        "dev.tsv": "sentence\tlabel\nit 's a charming journey . \t1\n",
        "test.tsv": "index\tsentence\n0\tuneasy mishmash of styles .\n",
    },
    "QQP": {
        "train.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                     f"133273\t213221\t213222\tHow is the {Q}life{Q}?\tHow is "
                     "life?\t1\n"
                     "1\t2\t3\tA broken row with a newline\n"
                     "402555\t536040\t536041\tHow do I buy?\tWhat do I buy?\t0\n",
        "dev.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                   "201359\t303345\t303346\tWhy are slugs?\tWhy are snails?\t0\n",
        "test.tsv": "id\tquestion1\tquestion2\n0\tWhat is X?\tWhat is Y?\n",
    },
    "QNLI": {
        "train.tsv": "index\tquestion\tsentence\tlabel\n0\tWhen?\tIn 1990.\t"
                     "entailment\n",
        "dev.tsv": "index\tquestion\tsentence\tlabel\n0\tWho?\tNobody knows.\t"
                   "not_entailment\n",
        "test.tsv": "index\tquestion\tsentence\n0\tWhat?\tThis.\n"
                    "1\tWhere?\tThere.\n",
    },
    "RTE": {
        "train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tNo Weapons.\t"
                     "Weapons found.\tnot_entailment\n",
        "dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\tA dog.\tAn animal.\t"
                   "entailment\n",
        "test.tsv": "index\tsentence1\tsentence2\n0\tRTE test.\tIts "
                    "hypothesis.\n",
    },
    "WNLI": {
        "train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tI stuck a pin.\t"
                     "The pin had a hole.\t1\n",
        "dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\tThe drain is "
                   "clogged.\tThe hair is clogged.\t0\n",
        "test.tsv": "index\tsentence1\tsentence2\n0\tMaude.\tMaude sang.\n",
    },
    "STS-B": {
        "train.tsv": "index\tgenre\tfilename\tyear\told_index\tsource1\t"
                     "source2\tsentence1\tsentence2\tscore\n0\tmain-captions\t"
                     "MSRvid\t2012test\t0001\tnone\tnone\tA plane is taking "
                     f"off {Q}now{Q}.\tAn air plane is taking off.\t5.000\n",
        "dev.tsv": "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\t"
                   "sentence1\tsentence2\tscore\n0\tmain-captions\tMSRvid\t"
                   "2012test\t0000\tnone\tnone\tA man with a hat.\tA man "
                   "wearing a hat.\t3.800\n",
        "test.tsv": "index\tgenre\tfilename\tyear\told_index\tsource1\t"
                    "source2\tsentence1\tsentence2\n0\tmain-captions\tMSRvid"
                    "\t2012test\t0024\tnone\tnone\tA girl styles.\tA girl "
                    "brushes.\n",
    },
}

# (task, split) -> [(text, text_b, label)] the reader must return.
EXPECTED = {
    ("CoLA", "train"): [(f"Our friends won't buy this {Q}analysis{Q}.", None, "1"),
                        ("One more pseudo generalization and I'm giving up.",
                         None, "0")],
    ("CoLA", "dev"): [("The more we study verbs, the crazier they get them.",
                       None, "0")],
    ("CoLA", "test"): [("Bill whistled past the house.", None, None)],
    ("MNLI", "train"): [(f"Conceptually cream {Q}skimming{Q}.",
                         "Product and geography.", "neutral")],
    ("MNLI", "dev"): [("The new rights.", "Everyone loves them.", "neutral")],
    ("MNLI-MM", "dev"): [("Mismatched premise.", "Hypothesis.",
                          "contradiction")],
    ("MNLI", "test"): [("Test premise.", "Test hypo.", None)],
    ("MRPC", "train"): [(f"Amrozi accused his brother {Q}the witness{Q}.",
                         f"Referring to him as only {Q}the witness{Q}.", "1"),
                        ("Yucaipa owned Dominick's.", "Yucaipa bought "
                         "Dominick's.", "0")],
    # A text that starts with a quote stays as written (csv's default
    # quoting would strip it, or swallow the next row for an odd one).
    ("MRPC", "dev"): [(f"{Q}He said{Q} the pie.", "The foodservice pie "
                       "business.", "1"), (f"{Q}Unbalanced.", "Second.", "0")],
    ("MRPC", "test"): [("PCCW's chief operating officer.",
                        "Current Chief Operating Officer.", None)],
    ("XNLI", "train"): [("你好 世界", "世界", "contradiction"),
                        ("他 来 了", "他 在", "entailment")],
    ("XNLI", "dev"): [("他说，妈妈，我回来了。", "他没说一句话。", "contradiction")],
    ("SST-2", "train"): [(f"hide new secretions {Q} ", None, "0"),
                         ("contains no wit ", None, "0")],
    ("SST-2", "test"): [("uneasy mishmash of styles .", None, None)],
    ("QQP", "train"): [(f"How is the {Q}life{Q}?", "How is life?", "1"),
                       ("How do I buy?", "What do I buy?", "0")],
    ("QQP", "test"): [("What is X?", "What is Y?", None)],
    ("QNLI", "dev"): [("Who?", "Nobody knows.", "not_entailment")],
    ("RTE", "train"): [("No Weapons.", "Weapons found.", "not_entailment")],
    ("WNLI", "test"): [("Maude.", "Maude sang.", None)],
    ("STS-B", "train"): [(f"A plane is taking off {Q}now{Q}.",
                          "An air plane is taking off.", "5.000")],
    ("STS-B", "test"): [("A girl styles.", "A girl brushes.", None)],
    # The twelve layouts the first version of this table left out.
    ("MNLI-MM", "train"): [(f"Conceptually cream {Q}skimming{Q}.",
                            "Product and geography.", "neutral")],
    ("MNLI-MM", "test"): [("Mismatched test.", "Its hypothesis.", None)],
    # Only the --xnli_language rows (zh by default), as the original.
    ("XNLI", "test"): [("测试前提。", "测试假设。", None)],
    ("SST-2", "dev"): [("it 's a charming journey . ", None, "1")],
    ("QQP", "dev"): [("Why are slugs?", "Why are snails?", "0")],
    ("QNLI", "train"): [("When?", "In 1990.", "entailment")],
    ("QNLI", "test"): [("What?", "This.", None), ("Where?", "There.", None)],
    ("RTE", "dev"): [("A dog.", "An animal.", "entailment")],
    ("RTE", "test"): [("RTE test.", "Its hypothesis.", None)],
    ("WNLI", "train"): [("I stuck a pin.", "The pin had a hole.", "1")],
    ("WNLI", "dev"): [("The drain is clogged.", "The hair is clogged.", "0")],
    ("STS-B", "dev"): [("A man with a hat.", "A man wearing a hat.",
                        "3.800")],
}


def _write(directory, files):
  for name, text in files.items():
    path = os.path.join(directory, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as f:
      f.write(text)


@pytest.mark.parametrize("task_name, split", sorted(EXPECTED))
def test_reads_each_download_layout(tmp_path, task_name, split):
  task = glue.get_task(task_name)
  _write(tmp_path, FILES[task_name.replace("-MM", "")])
  examples = glue.read_split(task, str(tmp_path), split)
  got = [(e.text, e.text_b, e.label) for e in examples]
  # MRPC's files start with a byte-order mark in the header only.
  assert got == EXPECTED[(task_name, split)]
  assert all(":" in e.where for e in examples)


def test_every_task_and_split_has_a_layout_case():
  # 11 tasks x train/dev/test: a layout without a case here is unchecked.
  assert sorted(EXPECTED) == sorted(
      (name, split) for name in glue.TASKS for split in ("train", "dev",
                                                         "test"))


def test_task_names_labels_and_metrics():
  # The original's lower-case names, HF's hyphenated ones, GLUE's dirs.
  for name in ("mrpc", "MRPC", "sts-b", "STS-B", "stsb", "sst-2", "SST2",
               "mnli-mm", "xnli", "cola"):
    assert glue.get_task(name).name.replace("-", "").lower() == (
        name.replace("-", "").lower())
  assert glue.get_task("MRPC").labels == ("0", "1")
  assert glue.get_task("MNLI").labels == ("contradiction", "entailment",
                                          "neutral")
  assert glue.get_task("RTE").labels == ("entailment", "not_entailment")
  assert glue.get_task("STS-B").regression
  metrics = {name: task.metric for name, task in glue.TASKS.items()}
  assert metrics["CoLA"] == "matthews_corrcoef"
  assert metrics["MRPC"] == metrics["QQP"] == "f1"
  assert metrics["STS-B"] == "pearson"
  assert glue.get_task("MNLI").dev.file == "dev_matched.tsv"
  assert not glue.get_task("SST-2").text_pair
  assert glue.get_task("QNLI").text_pair
  with pytest.raises(ValueError, match=r"--task_name=SQUAD is not a known "
                     r"task; use one of CoLA, MNLI"):
    glue.get_task("SQUAD")


@pytest.mark.parametrize("name, text, match", [
    ("dev.tsv", "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
     "2\t1\t2\ta\tb\n",
     r"dev.tsv:2: label '2' is not one of MRPC's labels \['0', '1'\]"),
    ("dev.tsv", "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
     "1\t1\t2\tonly one sentence\n",
     r"dev.tsv:2: 4 tab-separated fields, but MRPC's dev file has at least 5"),
    ("dev.tsv", "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n",
     r"dev.tsv has no examples"),
    ("elsewhere.tsv", "", r"--data_dir .* has no dev file dev.tsv for "
     r"--task_name=MRPC"),
])
def test_bad_files_are_one_sentence(tmp_path, name, text, match):
  _write(tmp_path, {name: text})
  with pytest.raises(ValueError, match=match):
    glue.read_split(glue.get_task("MRPC"), str(tmp_path), "dev")


def test_not_utf8_names_the_file(tmp_path):
  (tmp_path / "dev.tsv").write_bytes(b"\xff\xfe\x00binary\x00\n")
  with pytest.raises(ValueError, match=r"dev.tsv is not UTF-8 text"):
    glue.read_split(glue.get_task("SST-2"), str(tmp_path), "dev")
