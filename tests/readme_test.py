"""Keeps README.md and docs/ true to the tree: the CI command, the paths they
name, the links between them, and the README's shape (a front door of at most
250 lines, every program one click from its page)."""

import os
import re

import pytest

from tests import testing

PROGRAM_PACKAGES = ("official_bert", "tfrecords", "export", "tools",
                    "benchmarks")


def _read(page):
  with open(os.path.join(testing.ROOT, page), encoding="utf-8") as f:
    return f.read()


def _readme():
  return _read("README.md")


def _pages():
  docs = os.path.join(testing.ROOT, "docs")
  return ["README.md"] + sorted(
      f"docs/{name}" for name in os.listdir(docs) if name.endswith(".md"))


def _shell_blocks(text):
  return re.findall(r"```sh\n(.*?)```", text, flags=re.S)


def _programs():
  """Every program a user runs: a top-level module with a __main__ block."""
  found = []
  for package in PROGRAM_PACKAGES:
    for name in sorted(os.listdir(os.path.join(testing.ROOT, package))):
      if name.endswith(".py"):
        source = _read(os.path.join(package, name))
        if 'if __name__ == "__main__":' in source:
          found.append(f"{package}.{name[:-3]}")
  return found


def _section(text, heading):
  """The lines of `## heading...` up to the next `## `."""
  start = text.index("\n## " + heading)
  end = text.find("\n## ", start + 1)
  return text[start:end if end > 0 else None]


def _slug(heading):
  """GitHub's anchor of a heading."""
  return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_ci_runs_the_readme_test_command():
  with open(os.path.join(testing.ROOT, ".ci", "run")) as f:
    ci = f.read()
  commands = [line for block in _shell_blocks(_readme())
              for line in block.splitlines() if "pytest" in line]
  assert commands, "README has no test command in a ```sh block"
  test_command = commands[0].strip()
  assert test_command in ci, (
      f"README's test command is not what .ci/run runs: {test_command!r}")


@pytest.mark.parametrize("page", ["README.md", "docs/architecture.md"])
def test_paths_in_the_layout_table_exist(page):
  missing, checked = [], 0
  for cell in re.findall(r"^\| (`[^|]*`) \|", _read(page), flags=re.M):
    names = re.findall(r"`([^`]+)`", cell)
    directory = ""
    for name in names:
      if "/" in name:
        directory = os.path.dirname(name.rstrip("/"))
        path = name
      else:  # "attention.py" after "official_bert/modeling/embeddings.py"
        path = os.path.join(directory, name)
      checked += 1
      if not os.path.exists(os.path.join(testing.ROOT, path)):
        missing.append(path)
  assert checked >= 5, f"the layout table was not found in {page}"
  assert not missing, f"{page} names paths that do not exist: {missing}"


def test_the_readme_is_a_front_door():
  text = _readme()
  lines = text.splitlines()
  assert len(lines) <= 250, f"README.md has {len(lines)} lines (at most 250)"
  # The "I want to" table and the map of the tree, whole, in the first 120.
  for heading in ("## I want to", "## Map of the tree"):
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    end = next(i for i in range(start + 3, len(lines))
               if not lines[i].startswith("|"))
    assert end <= 120, f"{heading!r} ends at line {end} (past line 120)"
  # History lives in the git log; docs/performance.md holds today's figures.
  for pattern in (r"\b20\d\d-\d\d-\d\d\b", r"\bcommit [0-9a-f]{7,40}\b",
                  r"\bused to\b", r"\bbefore this\b", r"[Cc]hanged:"):
    found = re.search(pattern, text)
    assert not found, f"README.md has history: {found.group(0)!r}"


def test_every_program_is_one_click_from_the_readme():
  rows = [line for line in _section(_readme(), "I want to").splitlines()
          if line.startswith("| ")]
  programs = _programs()
  assert {"official_bert.run_pretraining", "tfrecords.learn_vocab",
          "export.export_saved_model", "tools.pydocs_ner"} <= set(programs)
  for program in programs:
    row = [r for r in rows if f"`python -m {program}" in r]
    assert row, f"no 'I want to' row runs `python -m {program}`"
    links = re.findall(r"\]\((docs/[\w.-]+\.md)", row[0])
    assert links, f"the row of {program} links no docs page"
    page = _read(links[0])
    assert program in page, f"{links[0]} does not mention {program}"


def test_links_resolve():
  bad = []
  for page in _pages():
    for target in re.findall(r"\]\(([^)\s]+)\)", _read(page)):
      if re.match(r"\w+://", target):
        continue
      path, _, anchor = target.partition("#")
      path = os.path.normpath(os.path.join(os.path.dirname(page), path)
                              if path else page)
      if not os.path.exists(os.path.join(testing.ROOT, path)):
        bad.append(f"{page}: {target} (no file)")
        continue
      if anchor:
        headings = re.findall(r"^#+ (.*)$", _read(path), flags=re.M)
        if anchor not in {_slug(h) for h in headings}:
          bad.append(f"{page}: {target} (no such heading)")
  assert not bad, bad


HISTORY_SESSION = re.compile(
    r"\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|"
    r"eleventh|twelfth|\d+(st|nd|rd|th)) session\b", flags=re.I)
COMMIT_HASH = re.compile(
    r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")


def _table_cells(text):
  """Every cell of every Markdown table row (`\\|` inside a cell kept)."""
  return [cell.strip()
          for line in text.splitlines() if line.startswith("|")
          for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def test_the_results_stay_short_and_the_history_stays_in_git():
  """docs/performance.md holds today's figures (at most 300 lines), README's
  table cells stay short and name no commit, and no page names the work
  session a figure came from: that history is the git log's."""
  lines = _read("docs/performance.md").splitlines()
  assert len(lines) <= 300, (
      f"docs/performance.md has {len(lines)} lines (at most 300): keep "
      "today's figures, move the rest to the git log")
  cells = _table_cells(_readme())
  assert len(cells) >= 100, "README's tables were not found"
  long_cells = [cell[:60] + "..." for cell in cells if len(cell) > 300]
  assert not long_cells, (
      f"README table cells over 300 characters (details belong in "
      f"docs/performance.md or the job's page): {long_cells}")
  hashes = [(found.group(0), cell[:60]) for cell in cells
            for found in [COMMIT_HASH.search(cell)] if found]
  assert not hashes, f"README table cells name commits: {hashes}"
  sessions = [(page, found.group(0)) for page in _pages()
              for found in HISTORY_SESSION.finditer(_read(page))]
  assert not sessions, f"pages name work sessions: {sessions}"
