"""Grading learners' notebooks: each check cell's outcome is collected, wrong answers do not hide others."""
import nbformat

from attnbook.exercises import grade


def test_grade_a_notebook_with_a_right_a_wrong_and_an_unattempted_answer(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import torch\nfrom attnbook.exercises import queries_keys_values as ex"),
        nbformat.v4.new_code_cell("ex.check_score_std(8.0)"),  # right
        nbformat.v4.new_code_cell("ex.check_score_std(64)"),  # the variance instead of the standard deviation
        nbformat.v4.new_code_cell("def my_softmax(s, t):\n    raise NotImplementedError\nex.check_softmax_temperature(my_softmax)"),
        nbformat.v4.new_code_cell("ex.check_softmax_temperature(lambda s, t: torch.softmax(s * t, -1))"),
    ]
    path = tmp_path / "learner.ipynb"
    nbformat.write(nb, path)
    rows = grade.grade_notebook(path, timeout=120)
    assert [(r.exercise, r.status) for r in rows] == [
        ("standard deviation of q.k for d_k = 64", "passed"),
        ("standard deviation of q.k for d_k = 64", "failed"),
        ("softmax with temperature", "not attempted"),
        ("softmax with temperature", "failed"),
    ]
    assert "variance" in rows[1].message and "divide" in rows[3].message

    csv_path = tmp_path / "grades.csv"
    assert grade.main([str(path), "--csv", str(csv_path)]) == 0
    assert csv_path.read_text().count("\n") == 5


def test_reading_saved_outputs_without_running(tmp_path):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("ex.check_attention(f)")
    cell.outputs = [nbformat.v4.new_output("error", ename="ExerciseFailed",
                                           evalue="scaled dot-product attention: the scores are not scaled", traceback=[])]
    nb.cells = [cell]
    path = tmp_path / "saved.ipynb"
    nbformat.write(nb, path)
    [row] = grade.grade_notebook(path, execute=False)
    assert (row.exercise, row.status, row.message) == ("scaled dot-product attention", "failed", "the scores are not scaled")
