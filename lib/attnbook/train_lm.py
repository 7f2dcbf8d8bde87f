"""The lab's command-line trainer: a character-level GPT on Tiny Shakespeare, with checkpoints and DDP.

    python -m attnbook.train_lm --out runs/book                      # the book's recipe
    python -m attnbook.train_lm --recipe nanogpt --out runs/ref      # nanoGPT's CPU recipe
    python -m attnbook.train_lm --config my.json --lr 2e-3 --out runs/x
    python -m attnbook.train_lm --out runs/book --resume             # continue after an interruption
    torchrun --nproc_per_node=2 -m attnbook.train_lm --out runs/ddp  # the same, on 2 processes

Every run writes to ``--out``: ``config.json``, ``log.jsonl`` (one JSON object per logged step and per
evaluation), ``ckpt.pt`` (model, optimiser, step; written atomically every ``checkpoint_every`` steps,
at the end, and on Ctrl-C) and ``samples.txt``.

**Resuming gives the same result as not stopping.** All randomness of step s (which windows form the
batch, dropout) is drawn from generators seeded by (seed, s, rank), and the checkpoint holds the model and
optimiser state, so a run resumed from step s replays exactly what an uninterrupted run would have done.

**Distributed.** Under ``torchrun`` each of the N processes trains a replica of the model on its own
``batch_size`` windows, and DistributedDataParallel averages the gradients (gloo on CPU, nccl on CUDA). The
N per-process batches are the slices of one global batch of N x batch_size windows, so N processes give the
same updates as one process with an N times larger batch.

Chapter: the lab (12).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from . import _checks, data, train
from .measure import count_parameters
from .models import GPT, TransformerConfig, lm_loss, lm_loss_sum

__all__ = [
    "TrainConfig",
    "RECIPES",
    "scaling_lr",
    "scaling_recipe",
    "Trainer",
    "CheckpointError",
    "make_optimizer",
    "load_checkpoint",
    "load_model",
    "train_run",
    "main",
]

CHECKPOINT_FORMAT = "attnbook.train_lm/1"


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training run of the lab's language model (model, data, optimiser, logging)."""

    # model
    n_layers: int = 4
    n_heads: int = 4
    d_model: int = 128
    d_ff: int | None = None
    block_size: int = 64
    dropout: float = 0.0
    bias: bool = False
    norm_position: str = "pre"
    mlp: str = "gelu"
    positional: str = "learned"
    tie_weights: bool = True
    qk_norm: bool = False
    # optimisation: AdamW, linear warmup then cosine decay to lr * min_lr_factor at `steps`
    batch_size: int = 12  # windows per process and step
    steps: int = 2000
    lr: float = 1e-3
    min_lr_factor: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0
    # data and bookkeeping
    dataset: str = "tinyshakespeare"
    val_fraction: float = 0.1
    seed: int = 1337
    eval_every: int = 250
    eval_batch_size: int = 64
    checkpoint_every: int = 250
    log_every: int = 10
    sample_chars: int = 500
    device: str = "auto"
    threads: int | None = None

    def __post_init__(self):
        for name in (
            "n_layers",
            "n_heads",
            "d_model",
            "block_size",
            "batch_size",
            "steps",
            "eval_every",
            "eval_batch_size",
            "checkpoint_every",
            "log_every",
        ):
            _checks.positive_int(name, getattr(self, name))
        for name in ("warmup_steps", "seed", "sample_chars"):
            _checks.positive_int(name, getattr(self, name), minimum=0)
        for name in ("d_ff", "threads"):
            if getattr(self, name) is not None:
                _checks.positive_int(name, getattr(self, name))
        _checks.positive_float("lr", self.lr)
        for name in ("min_lr_factor", "weight_decay", "grad_clip", "dropout"):
            _checks.positive_float(name, getattr(self, name), allow_zero=True)
        for name in ("beta1", "beta2", "val_fraction", "dropout"):
            if not 0.0 <= _checks.positive_float(name, getattr(self, name), allow_zero=True) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.min_lr_factor > 1:
            raise ValueError(f"min_lr_factor must be in [0, 1], got {self.min_lr_factor}")
        if self.warmup_steps >= self.steps:
            raise ValueError(f"warmup_steps must be smaller than steps, got {self.warmup_steps} and {self.steps}")
        if self.dataset != "tinyshakespeare":
            raise ValueError(f"dataset must be 'tinyshakespeare', got {self.dataset!r}")
        self.model_config(65)  # checks the model fields (heads divide the width, known norm/mlp/positional...)

    def model_config(self, vocab_size: int) -> TransformerConfig:
        """The model's :class:`~attnbook.models.TransformerConfig` for a vocabulary of ``vocab_size``."""
        return TransformerConfig(
            vocab_size=vocab_size,
            block_size=self.block_size,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            d_model=self.d_model,
            d_ff=self.d_ff,
            dropout=self.dropout,
            bias=self.bias,
            norm_position=self.norm_position,
            mlp=self.mlp,
            positional=self.positional,
            tie_weights=self.tie_weights,
            qk_norm=self.qk_norm,
        )

    def replace(self, **changes) -> TrainConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> TrainConfig:
        if not isinstance(values, dict):
            raise TypeError(f"a training configuration must be a mapping of fields, got {type(values).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"unknown configuration field(s): {', '.join(unknown)}; known fields: {', '.join(sorted(known))}"
            )
        return cls(**values)


# nanoGPT's CPU recipe for Shakespeare characters (its README: 4 layers, 4 heads, width 128, context 64,
# batch 12, no dropout, 2,000 iterations; its config file: AdamW lr 1e-3 with 100 warmup steps, cosine decay
# to 1e-4, betas (0.9, 0.99), weight decay 0.1, gradient clipping at 1, no biases, GELU, pre-norm).
# "book" is the recipe the lab teaches: see the lab chapter and benchmarks/README.md for why each choice.
RECIPES: dict[str, TrainConfig] = {
    "nanogpt": TrainConfig(),
    "book": TrainConfig(
        n_layers=2,
        n_heads=4,
        d_model=96,
        block_size=64,
        mlp="relu",
        batch_size=24,
        steps=900,
        lr=6e-3,
        warmup_steps=40,
        min_lr_factor=0.05,
        eval_every=50,
        checkpoint_every=100,
    ),
}


def scaling_lr(d_model: int) -> float:
    """The peak learning rate of the scaling grid for a model of width ``d_model``: 0.03 * (16 / d_model)^0.75.

    Fitted to short sweeps at widths 16, 32 and 96 (``benchmarks/README.md``): narrower models take larger
    steps. Chapter: scaling and practice.
    """
    return 0.03 * (16 / _checks.positive_int("d_model", d_model)) ** 0.75


def scaling_recipe(
    n_layers: int, d_model: int, n_heads: int, tokens: int, *, seed: int = 0, batch_size: int = 16, block_size: int = 64
) -> TrainConfig:
    """The book's recipe resized for the scaling grid: a model shape and a budget of training tokens.

    Everything else is the lab's recipe; the rule that changes with the size is the peak learning rate
    (:func:`scaling_lr`); the schedule fits the budget: ``tokens // (batch_size * block_size)`` steps, warmup
    over the first 5% (at least 5 steps), cosine decay to a tenth of the peak at the last step.

    Chapter: scaling and practice.
    """
    tokens = _checks.positive_int("tokens", tokens)
    batch_size = _checks.positive_int("batch_size", batch_size)
    block_size = _checks.positive_int("block_size", block_size)
    steps = tokens // (batch_size * block_size)
    if steps < 10:
        raise ValueError(f"tokens must buy at least 10 steps of {batch_size} x {block_size} tokens, got {tokens}")
    return RECIPES["book"].replace(
        n_layers=n_layers,
        d_model=d_model,
        n_heads=n_heads,
        batch_size=batch_size,
        block_size=block_size,
        steps=steps,
        lr=scaling_lr(d_model),
        warmup_steps=max(5, steps // 20),
        min_lr_factor=0.1,
        seed=seed,
        eval_every=steps,
        checkpoint_every=steps,
        sample_chars=0,
    )


# fields that may differ when a run is resumed: they change what is logged or saved, not what is computed
_RESUMABLE_CHANGES = {
    "eval_every",
    "checkpoint_every",
    "log_every",
    "sample_chars",
    "device",
    "threads",
    "eval_batch_size",
}


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: missing, corrupted, or made for another model or run."""


def make_optimizer(model: torch.nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on the weight matrices and embeddings only (not on biases or norm gains)."""
    _checks.module("model", model)
    _checks.instance("config", config, TrainConfig, "a TrainConfig")
    decay, no_decay = [], []
    for p in {id(p): p for p in model.parameters() if p.requires_grad}.values():
        (decay if p.dim() >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    try:  # the fused kernel (PyTorch >= 2.4 on CPU) does the whole update in one pass: same result, less time
        return torch.optim.AdamW(groups, lr=config.lr, betas=(config.beta1, config.beta2), fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(groups, lr=config.lr, betas=(config.beta1, config.beta2))


def _step_seed(seed: int, step: int, stream: int) -> int:
    """A seed for (run seed, step, stream) that no other triple of a run shares (stream 0: batches)."""
    return (seed * 1_000_003 + step) * 1_009 + stream


def _resolve_device(name: str, local_rank: int) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", local_rank)
        return train.pick_device()
    device = torch.device(name)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", local_rank)
    return device


class Trainer:
    """One training run, step by step: ``train_step()``, ``evaluate()``, ``save(path)``, ``load(path)``.

    ``rank`` and ``world_size`` come from torchrun's environment when a process group is initialised.
    """

    def __init__(self, config: TrainConfig, *, device: torch.device | str | None = None):
        if not isinstance(config, TrainConfig):
            raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
        self.config = config
        self.distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.distributed else 0
        self.world_size = dist.get_world_size() if self.distributed else 1
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        self.device = torch.device(device) if device is not None else _resolve_device(config.device, local_rank)
        if config.threads:
            torch.set_num_threads(config.threads)
        splits = data.load_shakespeare(val_fraction=config.val_fraction)
        self.tokenizer, self.train_ids, self.val_ids = splits.tokenizer, splits.train, splits.val
        self.model_config = config.model_config(self.tokenizer.vocab_size)
        torch.manual_seed(config.seed)  # the same initial weights on every process
        self.model = GPT(self.model_config).to(self.device)
        self.net = self.model
        if self.distributed:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.net = DistributedDataParallel(self.model, device_ids=ids)
        self.optimizer = make_optimizer(self.model, config)
        self.schedule = train.cosine_schedule(
            config.steps, warmup_steps=config.warmup_steps, min_factor=config.min_lr_factor
        )
        self.step = 0
        self.train_seconds = 0.0  # time spent in train_step, summed over resumed segments

    @property
    def n_params(self) -> int:
        return count_parameters(self.model)

    def lr_at(self, step: int) -> float:
        return self.config.lr * self.schedule(step)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This process's slice of the global batch of step ``step``: x, y of shape (batch_size, block_size)."""
        c = self.config
        g = torch.Generator().manual_seed(_step_seed(c.seed, step, 0))
        x, y = data.lm_batch(self.train_ids, c.batch_size * self.world_size, c.block_size, generator=g)
        part = slice(self.rank * c.batch_size, (self.rank + 1) * c.batch_size)
        return x[part].to(self.device), y[part].to(self.device)  # (B, T), (B, T)

    def train_step(self) -> float:
        """One optimiser step; returns this process's training loss (nats per character)."""
        start = time.perf_counter()
        lr = self.lr_at(self.step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        x, y = self.batch(self.step)
        torch.manual_seed(_step_seed(self.config.seed, self.step, 1 + self.rank))  # dropout of this step
        self.net.train()
        loss = lm_loss(self.net(x), y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        self.optimizer.step()
        value = loss.item()
        if not math.isfinite(value):
            raise FloatingPointError(f"the training loss became {value} at step {self.step}; lower the learning rate")
        self.step += 1
        self.train_seconds += time.perf_counter() - start
        return value

    def mean_over_processes(self, value: float) -> float:
        if not self.distributed:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.item() / self.world_size

    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean cross-entropy on the whole validation split (shared out among the processes)."""
        total, count = lm_loss_sum(
            self.model, self.val_ids, batch_size=self.config.eval_batch_size, shard=(self.rank, self.world_size)
        )
        if self.distributed:
            t = torch.tensor([total, count], dtype=torch.float64, device=self.device)
            dist.all_reduce(t)
            total, count = t.tolist()
        return total / count

    def state_dict(self) -> dict:
        return {
            "format": CHECKPOINT_FORMAT,
            "step": self.step,
            "train_seconds": self.train_seconds,
            "world_size": self.world_size,
            "train_config": self.config.to_dict(),
            "model_config": self.model_config.to_dict(),
            "chars": self.tokenizer.chars,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
        }

    def save(self, path: str | os.PathLike) -> None:
        """Write a checkpoint atomically (a temporary file renamed into place); only rank 0 writes."""
        if self.rank == 0:
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            torch.save(self.state_dict(), tmp)
            os.replace(tmp, path)
        if self.distributed:
            dist.barrier()

    def load(self, path: str | os.PathLike) -> None:
        """Continue from a checkpoint of the same run; a checkpoint of another model or run is refused."""
        ckpt = _read_checkpoint(path, map_location=self.device)
        # a field added to TrainConfig after the checkpoint was written had its default value in that run
        saved = {**TrainConfig().to_dict(), **ckpt["train_config"]}
        differences = _config_differences(saved, self.config.to_dict(), ignore=_RESUMABLE_CHANGES)
        if differences:
            raise CheckpointError(
                f"{path} was written by a run with a different configuration ({differences}); "
                "resume with the same configuration, or start a new run in another --out folder"
            )
        if ckpt["chars"] != self.tokenizer.chars:
            raise CheckpointError(f"{path} was trained on another vocabulary ({len(ckpt['chars'])} characters)")
        if ckpt["world_size"] != self.world_size:
            raise CheckpointError(
                f"{path} was written by a run on {ckpt['world_size']} process(es), this run has "
                f"{self.world_size}: the global batch would change; resume with the same number"
            )
        _load_model_state(self.model, ckpt["model"], path)
        try:
            self.optimizer.load_state_dict(ckpt["optimizer"])
        except (ValueError, KeyError, RuntimeError) as error:
            raise CheckpointError(f"{path}: the optimiser state does not fit this model ({error})") from None
        self.step = int(ckpt["step"])
        self.train_seconds = float(ckpt["train_seconds"])

    def sample(self, prompt: str = "\n", n_chars: int = 500, *, temperature: float = 1.0) -> str:
        g = torch.Generator(device=self.device).manual_seed(self.config.seed)
        idx = self.tokenizer.encode(prompt).to(self.device)
        out = self.model.generate(idx, n_chars, temperature=temperature, generator=g)
        return self.tokenizer.decode(out[0])


def _config_differences(saved: dict, current: dict, *, ignore=()) -> str:
    keys = sorted((set(saved) | set(current)) - set(ignore))
    diffs = [
        f"{k}: checkpoint {saved.get(k)!r}, now {current.get(k)!r}" for k in keys if saved.get(k) != current.get(k)
    ]
    return "; ".join(diffs)


def _read_checkpoint(path, *, map_location=None) -> dict:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a path (a str or a pathlib.Path), got {type(path).__name__}")
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at path {str(path)!r}")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # truncated files, other pickles, random bytes: all refused the same way
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise CheckpointError(
            f"path {str(path)!r} is not a readable checkpoint (corrupted or not written by "
            f"attnbook.train_lm): {message}"
        ) from None
    required = {
        "format",
        "step",
        "train_seconds",
        "world_size",
        "train_config",
        "model_config",
        "chars",
        "model",
        "optimizer",
    }
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT or not required <= set(ckpt):
        found = ckpt.get("format") if isinstance(ckpt, dict) else type(ckpt).__name__
        raise CheckpointError(
            f"path {str(path)!r} is not an attnbook.train_lm checkpoint (expected format "
            f"{CHECKPOINT_FORMAT!r}, found {found!r})"
        )
    return ckpt


def _load_model_state(model: torch.nn.Module, state: dict, path) -> None:
    ours = model.state_dict()
    missing = sorted(set(ours) - set(state))
    unexpected = sorted(set(state) - set(ours))
    shapes = [
        f"{k}: checkpoint {tuple(state[k].shape)}, model {tuple(ours[k].shape)}"
        for k in sorted(set(ours) & set(state))
        if tuple(state[k].shape) != tuple(ours[k].shape)
    ]
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing[:5])}")
        if unexpected:
            parts.append(f"unexpected {', '.join(unexpected[:5])}")
        if shapes:
            parts.append("different shapes " + "; ".join(shapes[:5]))
        raise CheckpointError(f"{path} does not fit this model: " + "; ".join(parts))
    model.load_state_dict(state)


def load_checkpoint(path: str | os.PathLike, *, map_location="cpu") -> dict:
    """Read and check a checkpoint of ``train_lm`` (``torch.load`` with ``weights_only=True``)."""
    return _read_checkpoint(path, map_location=map_location)


def load_model(path: str | os.PathLike, *, device="cpu") -> tuple[GPT, data.CharTokenizer]:
    """The trained model (in eval mode) and its tokenizer from a ``train_lm`` checkpoint."""
    ckpt = _read_checkpoint(path, map_location=device)
    try:
        config = TransformerConfig(**ckpt["model_config"])
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{path} holds an invalid model configuration: {error}") from None
    model = GPT(config).to(device)
    _load_model_state(model, ckpt["model"], path)
    return model.eval(), data.CharTokenizer(ckpt["chars"])


class _Log:
    """log.jsonl of rank 0; on resume, the lines after the checkpoint's step are dropped (they are redone)."""

    def __init__(self, path: Path | None, resume_step: int | None):
        self.path = path
        if path is None:
            return
        if resume_step is None or not path.exists():
            path.write_text("")
            return
        kept = [
            line
            for line in path.read_text().splitlines()
            if line.strip() and json.loads(line).get("step", 0) <= resume_step
        ]
        path.write_text("".join(line + "\n" for line in kept))

    def write(self, **record) -> None:
        if self.path is not None:
            with open(self.path, "a") as handle:
                handle.write(json.dumps(record) + "\n")


def train_run(
    config: TrainConfig,
    out_dir: str | os.PathLike | None = None,
    *,
    resume: bool = False,
    stop_after: int | None = None,
) -> dict:
    """Train (or resume) one run; returns a summary (steps, losses, times). Used by :func:`main`.

    ``stop_after`` ends the run after that many steps as if interrupted (with a checkpoint), for tests.
    """
    trainer = Trainer(config)
    rank0 = trainer.rank == 0
    out = Path(out_dir) if out_dir is not None else None
    ckpt_path = out / "ckpt.pt" if out is not None else None
    resumed_from = None
    if resume:
        if ckpt_path is None:
            raise ValueError("resume needs an out_dir that holds ckpt.pt")
        if ckpt_path.exists():
            trainer.load(ckpt_path)
            resumed_from = trainer.step
    if out is not None and rank0:
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(config.to_dict(), indent=2) + "\n")
    log = _Log(out / "log.jsonl" if (out is not None and rank0) else None, resumed_from)
    c = config
    last_val = None
    if trainer.step == 0:
        last_val = trainer.evaluate()
        log.write(step=0, val_loss=last_val, train_seconds=0.0)
    bar = train.progress(
        total=c.steps,
        initial=trainer.step,
        desc=f"training (rank {trainer.rank})",
        disable=not rank0 or os.environ.get("ATTNBOOK_PROGRESS", "1") == "0",
    )
    interrupted = False
    try:
        while trainer.step < c.steps:
            loss = trainer.train_step()
            bar.update(1)
            step = trainer.step
            if step % c.log_every == 0 or step == c.steps:
                loss = trainer.mean_over_processes(loss)
                log.write(step=step, loss=loss, lr=trainer.lr_at(step - 1), train_seconds=trainer.train_seconds)
                bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
            if step % c.eval_every == 0 or step == c.steps:
                last_val = trainer.evaluate()
                log.write(step=step, val_loss=last_val, train_seconds=trainer.train_seconds)
            if ckpt_path is not None and (step % c.checkpoint_every == 0 or step == c.steps):
                trainer.save(ckpt_path)
            if stop_after is not None and step >= stop_after and step < c.steps:
                interrupted = True
                break
    except KeyboardInterrupt:  # Ctrl-C: keep what was done; --resume continues from here
        interrupted = True
    finally:
        bar.close()
    if interrupted and ckpt_path is not None:
        trainer.save(ckpt_path)
    summary = {
        "step": trainer.step,
        "steps": c.steps,
        "finished": trainer.step >= c.steps,
        "resumed_from": resumed_from,
        "val_loss": last_val,
        "train_seconds": trainer.train_seconds,
        "n_params": trainer.n_params,
        "world_size": trainer.world_size,
    }
    if rank0 and out is not None and summary["finished"] and c.sample_chars:
        (out / "samples.txt").write_text(trainer.sample("\n", c.sample_chars))
    if rank0 and out is not None:
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m attnbook.train_lm", description="Train the lab's character-level GPT on Tiny Shakespeare."
    )
    parser.add_argument("--out", default=None, help="folder for config.json, log.jsonl, ckpt.pt, samples.txt")
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="book", help="the starting configuration")
    parser.add_argument("--config", default=None, help="a JSON or TOML file of TrainConfig fields (over the recipe)")
    parser.add_argument("--resume", action="store_true", help="continue from <out>/ckpt.pt if it exists")
    parser.add_argument("--stop-after", type=int, default=None, help=argparse.SUPPRESS)  # simulate an interruption
    for field in dataclasses.fields(TrainConfig):
        flag = "--" + field.name.replace("_", "-")
        default = getattr(TrainConfig(), field.name)
        kind = type(default) if default is not None else int
        if kind is bool:
            parser.add_argument(flag, dest=field.name, default=None, type=_parse_bool, metavar="{true,false}")
        else:
            parser.add_argument(flag, dest=field.name, default=None, type=kind)
    return parser


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _read_config_file(path: str) -> dict:
    file = Path(path)
    if not file.is_file():
        raise SystemExit(f"--config: no such file: {path}")
    text = file.read_text()
    try:
        if file.suffix == ".toml":
            import tomllib

            return tomllib.loads(text)
        return json.loads(text)
    except ValueError as error:
        raise SystemExit(
            f"--config: {path} is not valid {'TOML' if file.suffix == '.toml' else 'JSON'}: {error}"
        ) from error


def config_from_args(argv: list[str] | None = None) -> tuple[TrainConfig, argparse.Namespace]:
    """The configuration a command line asks for: recipe, then the --config file, then the flags."""
    args = _parser().parse_args(argv)
    values = RECIPES[args.recipe].to_dict()
    if args.config:
        values.update(_read_config_file(args.config))
    values.update(
        {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig) if getattr(args, f.name) is not None}
    )
    try:
        return TrainConfig.from_dict(values), args
    except (TypeError, ValueError) as error:
        raise SystemExit(f"invalid configuration: {error}") from None


def main(argv: list[str] | None = None) -> int:
    config, args = config_from_args(argv)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed and not dist.is_initialized():
        device = _resolve_device(config.device, int(os.environ.get("LOCAL_RANK", 0)))
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    try:
        summary = train_run(config, args.out, resume=args.resume, stop_after=args.stop_after)
    except CheckpointError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    finally:
        if distributed and dist.is_initialized():
            dist.destroy_process_group()
    if summary["world_size"] == 1 or int(os.environ.get("RANK", "0")) == 0:
        state = "finished" if summary["finished"] else "stopped (resume with --resume)"
        print(
            f"{state} at step {summary['step']}/{summary['steps']}: validation loss {summary['val_loss']:.4f}, "
            f"{summary['train_seconds']:.1f} s of training, {summary['n_params']:,} parameters"
            + (f", output in {args.out}" if args.out else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
