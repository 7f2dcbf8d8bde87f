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

The package: ``config`` (TrainConfig), ``recipes`` (nanoGPT's and the book's), ``trainer`` (the optimiser,
Trainer, train_run), ``checkpoints`` (reading and checking them, loading a trained model) and ``cli`` (the
command line).

Chapter: the lab (12).
"""

from .checkpoints import CHECKPOINT_FORMAT as CHECKPOINT_FORMAT
from .checkpoints import CheckpointError, load_checkpoint, load_model
from .cli import config_from_args as config_from_args
from .cli import main
from .config import TrainConfig
from .recipes import RECIPES
from .trainer import Trainer, make_optimizer, train_run

__all__ = [
    "TrainConfig",
    "RECIPES",
    "Trainer",
    "CheckpointError",
    "make_optimizer",
    "load_checkpoint",
    "load_model",
    "train_run",
    "main",
]
