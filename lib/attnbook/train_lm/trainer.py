"""One training run of the lab's model, step by step (:class:`Trainer`), and a whole run with its log,
checkpoints and samples (:func:`train_run`), on one process or several under ``torchrun``.

Chapter: the lab (12).
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from .. import _checks, data, train
from ..measure import count_parameters
from ..models import GPT, lm_loss, lm_loss_sum
from .checkpoints import CHECKPOINT_FORMAT, CheckpointError, _config_differences, _load_model_state, _read_checkpoint
from .config import TrainConfig

__all__ = ["make_optimizer", "Trainer", "train_run"]

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
