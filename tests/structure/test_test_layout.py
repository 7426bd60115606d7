"""The tests are folders by topic: every test file has a name of its own (a name says what it tests, not
which folder's copy it is), and no folder is numbered by iteration (`library_compat2`)."""

import re
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_file_has_a_name_of_its_own():
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [n for n, count in names.items() if count > 1] == []


def test_no_folder_is_numbered_by_iteration():
    assert [p.name for p in TESTS.rglob("*") if p.is_dir() and re.search(r"\d$", p.name)] == []
