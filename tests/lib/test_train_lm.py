"""attnbook.train_lm: the command line, exact resume, refused checkpoints, and DDP with 2 CPU processes."""

import json
import os
import subprocess
import sys

import pytest
import torch
from attnbook import data, train_lm
from attnbook.train_lm import CheckpointError, TrainConfig, Trainer

TINY = dict(
    n_layers=1,
    n_heads=2,
    d_model=16,
    block_size=16,
    batch_size=4,
    steps=6,
    warmup_steps=1,
    eval_every=3,
    checkpoint_every=3,
    log_every=1,
    eval_batch_size=512,
    sample_chars=20,
    lr=3e-3,
    dropout=0.1,
)
TINY_FLAGS = [f"--{k.replace('_', '-')}={v}" for k, v in TINY.items()]


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setenv("ATTNBOOK_PROGRESS", "0")


@pytest.fixture(scope="module")
def shakespeare():
    return data.load_shakespeare()


def params(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_resume_gives_the_same_result_as_an_uninterrupted_run(tmp_path):
    config = TrainConfig(**TINY)
    straight = train_lm.train_run(config, tmp_path / "a")
    stopped = train_lm.train_run(config, tmp_path / "b", stop_after=4)  # interrupted after step 4
    assert not stopped["finished"] and stopped["step"] == 4
    resumed = train_lm.train_run(config, tmp_path / "b", resume=True)
    assert resumed["resumed_from"] == 4 and resumed["finished"]
    a = train_lm.load_checkpoint(tmp_path / "a" / "ckpt.pt")
    b = train_lm.load_checkpoint(tmp_path / "b" / "ckpt.pt")
    assert a["step"] == b["step"] == 6
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    assert resumed["val_loss"] == straight["val_loss"]
    log = [json.loads(line) for line in (tmp_path / "b" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "loss" in r] == [1, 2, 3, 4, 5, 6]  # no step logged twice
    assert (tmp_path / "b" / "samples.txt").read_text()


def test_the_loss_goes_down_and_the_model_generates(tmp_path):
    config = TrainConfig(**{**TINY, "steps": 100, "eval_every": 100, "batch_size": 8, "dropout": 0.0, "lr": 1e-2})
    summary = train_lm.train_run(config, tmp_path)
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    vals = [r["val_loss"] for r in log if "val_loss" in r]
    assert vals[0] > 4.0 and vals[-1] < 3.4  # from about ln 65 = 4.17 to the unigram level (3.3) or below
    model, tokenizer = train_lm.load_model(tmp_path / "ckpt.pt")
    text = tokenizer.decode(model.generate(tokenizer.encode("ROMEO:"), 30, temperature=0.0)[0])
    assert text.startswith("ROMEO:") and len(text) == 36
    with pytest.raises(ValueError, match="outside the vocabulary: 'é'"):
        tokenizer.encode("café")
    assert summary["n_params"] == sum(p.numel() for p in model.parameters())


def test_ddp_is_one_process_with_the_global_batch(tmp_path):
    """2 processes with batch b each give the same model as 1 process with batch 2b (gloo on CPU)."""
    flags = [*TINY_FLAGS, "--dropout=0.0", "--steps=3", "--device=cpu", "--threads=1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "attnbook.train_lm",
            *flags,
            f"--out={tmp_path / 'ddp'}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "finished at step 3/3" in run.stdout
    single = subprocess.run(
        [sys.executable, "-m", "attnbook.train_lm", *flags, "--batch-size=8", f"--out={tmp_path / 'one'}"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert single.returncode == 0, single.stderr[-3000:]
    ddp = train_lm.load_checkpoint(tmp_path / "ddp" / "ckpt.pt")
    one = train_lm.load_checkpoint(tmp_path / "one" / "ckpt.pt")
    assert ddp["world_size"] == 2 and one["world_size"] == 1
    for key in one["model"]:
        torch.testing.assert_close(ddp["model"][key], one["model"][key], atol=1e-5, rtol=1e-4)


def test_command_line_flags_and_config_file(tmp_path, capsys):
    config_file = tmp_path / "run.json"
    config_file.write_text(json.dumps({**TINY, "steps": 2, "eval_every": 2}))
    assert train_lm.main(["--config", str(config_file), "--lr", "0.002", "--out", str(tmp_path / "run")]) == 0
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["lr"] == 0.002 and saved["steps"] == 2 and saved["d_model"] == 16
    assert "finished at step 2/2" in capsys.readouterr().out
    config, _ = train_lm.config_from_args(["--recipe", "nanogpt", "--bias", "true"])
    assert config == train_lm.RECIPES["nanogpt"].replace(bias=True)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"d_modle": 3}))
    with pytest.raises(SystemExit, match="unknown configuration field.*d_modle"):
        train_lm.main(["--config", str(bad)])
    with pytest.raises(SystemExit, match="d_model must be divisible by n_heads"):
        train_lm.main(["--d-model", "10", "--n-heads", "4"])


def test_a_toml_config_file(tmp_path, capsys):
    """TOML reads as JSON does (Python 3.11 and later, tomllib); before 3.11 the error says so and what to give."""
    toml = tmp_path / "run.toml"
    toml.write_text("\n".join(f"{k} = {json.dumps(v)}" for k, v in {**TINY, "steps": 2, "eval_every": 2}.items()))
    if sys.version_info < (3, 11):
        with pytest.raises(SystemExit, match="TOML file needs Python 3.11 or later; give a JSON file"):
            train_lm.main(["--config", str(toml), "--out", str(tmp_path / "run")])
        return
    assert train_lm.main(["--config", str(toml), "--out", str(tmp_path / "run")]) == 0
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["steps"] == 2 and saved["d_model"] == TINY["d_model"]
    assert "finished at step 2/2" in capsys.readouterr().out


def test_the_nanogpt_recipe_is_the_published_one():
    c = train_lm.RECIPES["nanogpt"]
    assert (c.n_layers, c.n_heads, c.d_model, c.block_size, c.batch_size, c.dropout, c.lr, c.steps) == (
        4,
        4,
        128,
        64,
        12,
        0.0,
        1e-3,
        2000,
    )


# --- refused checkpoints --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("ckpt")
    with pytest.MonkeyPatch.context() as patch:  # no progress bar, and no change left for the tests after
        patch.setenv("ATTNBOOK_PROGRESS", "0")
        train_lm.train_run(TrainConfig(**{**TINY, "steps": 2}), out)
    return out / "ckpt.pt"


def test_corrupted_checkpoints_are_refused(tmp_path, checkpoint):
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(checkpoint.read_bytes()[:500])
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(os.urandom(2000))
    for path in (truncated, garbage):
        with pytest.raises(CheckpointError, match="not a readable checkpoint"):
            train_lm.load_checkpoint(path)
    tensor_file = tmp_path / "tensor.pt"
    torch.save(torch.zeros(3), tensor_file)
    with pytest.raises(CheckpointError, match="not an attnbook.train_lm checkpoint"):
        train_lm.load_model(tensor_file)
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        train_lm.load_checkpoint(tmp_path / "missing.pt")


def test_a_checkpoint_of_another_model_or_run_is_refused(checkpoint):
    other = Trainer(TrainConfig(**{**TINY, "steps": 2, "d_model": 32}))
    with pytest.raises(CheckpointError, match="different configuration.*d_model: checkpoint 16, now 32"):
        other.load(checkpoint)
    other = Trainer(TrainConfig(**{**TINY, "steps": 2, "lr": 1e-4}))
    with pytest.raises(CheckpointError, match="lr: checkpoint 0.003, now 0.0001"):
        other.load(checkpoint)
    # only logging fields may change on resume
    Trainer(TrainConfig(**{**TINY, "steps": 2, "log_every": 5})).load(checkpoint)
    # a state dict whose shapes do not fit is refused by name
    ckpt = train_lm.load_checkpoint(checkpoint)
    model, _ = train_lm.load_model(checkpoint)
    ckpt["model"]["embed.token.weight"] = torch.zeros(65, 8)
    with pytest.raises(CheckpointError, match="different shapes embed.token.weight"):
        train_lm.checkpoints._load_model_state(model, ckpt["model"], "edited")


def test_resume_refuses_a_different_configuration_from_the_command_line(tmp_path, checkpoint, capsys):
    out = checkpoint.parent
    code = train_lm.main([*TINY_FLAGS, "--steps=2", "--lr=0.01", "--resume", f"--out={out}"])
    assert code == 2
    assert "lr: checkpoint 0.003, now 0.01" in capsys.readouterr().err


def test_config_errors():
    with pytest.raises(ValueError, match="warmup_steps must be smaller than steps"):
        TrainConfig(steps=10, warmup_steps=10)
    with pytest.raises(ValueError, match=r"beta2 must be in \[0, 1\)"):
        TrainConfig(beta2=1.0)
    with pytest.raises(ValueError, match="unknown configuration field"):
        TrainConfig.from_dict({"layers": 3})
    with pytest.raises(ValueError, match="d_model must be divisible by n_heads"):  # TransformerConfig's check
        TrainConfig(d_model=10, n_heads=4)


def test_a_checkpoint_from_before_a_new_field_resumes_with_its_default(tmp_path, checkpoint):
    ckpt = torch.load(checkpoint, weights_only=True)
    del ckpt["train_config"]["qk_norm"]  # as written before TrainConfig had the field
    old = tmp_path / "old.pt"
    torch.save(ckpt, old)
    trainer = Trainer(TrainConfig(**{**TINY, "steps": 2}))
    trainer.load(old)
    assert trainer.step == ckpt["step"]
    with pytest.raises(CheckpointError, match="qk_norm: checkpoint False, now True"):
        Trainer(TrainConfig(**{**TINY, "steps": 2, "qk_norm": True})).load(old)
