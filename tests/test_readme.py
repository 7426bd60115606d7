"""The README's code examples run as written."""

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_has_an_example_of_each_generation():
    assert len(BLOCKS) >= 2
    assert any("opennki.legacy" in b for b in BLOCKS) and any("import opennki as nki" in b for b in BLOCKS)


@pytest.mark.parametrize("source", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_example_runs(source, tmp_path):
    path = tmp_path / "example.py"     # a real file, so kernel lines have a source to point at
    path.write_text(source)
    exec(compile(source, str(path), "exec"), {"__name__": "readme_example"})
