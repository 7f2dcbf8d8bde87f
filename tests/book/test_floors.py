"""book/_ext/attnbook_book/floors.py: the lowest versions ``make test-compat`` installs."""

import pytest
from attnbook_book import floors

PYPROJECT = """
[project]
name = "x"
dependencies = ["torch>=2.4", "numpy>=1.24"]
[project.optional-dependencies]
export = ["torch>=2.6", "onnx>=1.17", "onnxruntime>=1.18"]
wrong = ["pandas<3"]
"""


def test_floors_pin_each_lowest_version_and_an_extra_raises_a_floor(tmp_path, capsys, monkeypatch):
    path = tmp_path / "pyproject.toml"
    path.write_text(PYPROJECT)
    assert floors.floors(path, [], set()) == ["torch==2.4", "numpy==1.24"]
    assert floors.floors(path, ["export"], {"numpy"}, {"onnxruntime"}) == [
        "torch==2.6",
        "onnx==1.17",
        "onnxruntime>=1.18",
    ]
    assert floors.main([str(path), "--extras", "export", "--floor", "torch"]) == 0
    assert capsys.readouterr().out.strip() == "2.6"
    with pytest.raises(SystemExit, match="no lowest version"):
        floors.floors(path, ["wrong"], set())
    with pytest.raises(SystemExit, match="unknown extras"):
        floors.floors(path, ["absent"], set())
