"""The installed package (``pip install .``, not the editable one) carries its data: it loads both datasets
and the lab's trained GPT with no network, from a folder outside the repository."""

import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Run by the installed interpreter in an empty folder: every network connection raises, so a download
# attempt fails loudly; then the datasets are loaded from the package alone.
OFFLINE_CHECK = textwrap.dedent("""
    import socket, sys
    from pathlib import Path

    class NoNetwork(OSError):
        pass

    def refuse(*args, **kwargs):
        raise NoNetwork(f"network access attempted: {args[:2]}")

    socket.socket.connect = socket.socket.connect_ex = refuse
    socket.create_connection = socket.getaddrinfo = refuse

    import attnbook
    from attnbook import data

    venv = Path(sys.argv[1]).resolve()
    imported = Path(attnbook.__file__).resolve()
    assert imported.is_relative_to(venv), f"imported {attnbook.__file__}, not the installed copy"
    for name, spec in data.DATASETS.items():
        path = data.fetch(name)
        assert path.resolve().is_relative_to(venv), path
        assert data.sha256_of(path) == spec.sha256 and path.stat().st_size == spec.size, name
    assert len(data.load_eng_fra()) == 5000
    splits = data.load_shakespeare()
    assert len(splits.tokenizer.chars) == 65
    assert len(splits.train) + len(splits.val) == data.DATASETS["tinyshakespeare"].size
    assert (data.packaged_dir() / "eng-fra" / "LICENSE").is_file() and (data.packaged_dir() / "README.md").is_file()

    # the lab's trained GPT ships too (chapter 16 loads it)
    from attnbook import interpret

    model, tokenizer = interpret.load_lab_gpt()
    assert tokenizer.chars == splits.tokenizer.chars and model.config.vocab_size == 65

    # the fallback would download: with no network it must fail with the library's error, naming the URL
    data.DATASETS["absent"] = data.Dataset("absent", "absent/x.txt", "https://example.org/x.txt", "0" * 64, 1, "test")
    try:
        data.fetch("absent", timeout=2)
    except data.DataNotAvailableError as error:
        assert "network access attempted" in str(error) and "https://example.org/x.txt" in str(error), error
    else:
        raise AssertionError("a download was not refused")
    print("offline ok")
""")


def test_pip_install_carries_both_datasets_and_loads_them_offline(tmp_path):
    # a copy of what the package is built from, so that the build leaves nothing in the repository
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "lib", src / "lib", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))

    # a bare virtual environment that sees this environment's dependencies (torch, numpy, setuptools, pip,
    # ...) through a .pth line, but not its editable install of attnbook (that is a .pth file of its own,
    # which Python reads only in the site directory itself)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            str(src),
        ],
        check=True,
        cwd=tmp_path,
    )
    installed = site / "attnbook"
    assert (installed / "data_files" / "eng-fra" / "eng-fra.txt").is_file()
    assert (installed / "exercises" / "chapters.json").is_file()

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(elsewhere),
        "ATTNBOOK_CACHE": str(elsewhere / "cache"),
        "OMP_NUM_THREADS": "1",
        "no_proxy": "",
        "http_proxy": "http://127.0.0.1:9",
        "https_proxy": "http://127.0.0.1:9",
    }
    run = subprocess.run(
        [str(python), "-c", OFFLINE_CHECK, str(venv)],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0 and "offline ok" in run.stdout, run.stdout + run.stderr
    assert not (elsewhere / "cache").exists()  # nothing was downloaded or cached
