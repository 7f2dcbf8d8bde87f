"""The command line: ``python -m attnbook.train_lm`` (a recipe, then a configuration file, then flags).

Chapter: the lab (12).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from .checkpoints import CheckpointError
from .config import TrainConfig
from .recipes import RECIPES
from .trainer import _resolve_device, train_run

__all__ = ["config_from_args", "main"]


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
            if sys.version_info < (3, 11):
                raise SystemExit(f"--config: {path}: a TOML file needs Python 3.11 or later; give a JSON file")
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
