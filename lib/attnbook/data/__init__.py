"""Data for the chapters: named files (fetched, verified by sha256, cached), text as tokens, the corpora,
synthetic tasks and images. Every name is available as ``attnbook.data.<name>``; the modules are:

- :mod:`attnbook.data.files`: ``DATASETS``, ``fetch`` and where files are looked for and kept;
- :mod:`attnbook.data.text`: normalising and tokenizing text, ``Vocab`` and ``CharTokenizer``;
- :mod:`attnbook.data.corpora`: the English-French pairs and Tiny Shakespeare, their splits, ``lm_batch``;
- :mod:`attnbook.data.synthetic`: digit strings, dates, the adding problem and the shuffled-word task;
- :mod:`attnbook.data.instructions`: instructions whose answers a program checks (import the module:
  ``from attnbook.data import instructions``);
- :mod:`attnbook.data.images`: scikit-learn's digits and balanced subsets.
"""

from .corpora import SentencePair, TextSplits, lm_batch, load_eng_fra, load_shakespeare, split_by_source
from .files import DATASETS, DataNotAvailableError, Dataset, cache_dir, fetch, packaged_dir, sha256_of
from .images import ImageSplits, balanced_subset, load_digits
from .synthetic import ADDING_BASELINE_MSE, adding_problem, date_pairs, digit_pairs, shuffled_word_task, words_of
from .text import BOS, EOS, PAD, UNK, CharTokenizer, Vocab, detokenize, normalize_text, tokenize

__all__ = [
    "DATASETS",
    "Dataset",
    "DataNotAvailableError",
    "fetch",
    "cache_dir",
    "packaged_dir",
    "sha256_of",
    "PAD",
    "UNK",
    "BOS",
    "EOS",
    "normalize_text",
    "tokenize",
    "detokenize",
    "Vocab",
    "SentencePair",
    "load_eng_fra",
    "split_by_source",
    "digit_pairs",
    "date_pairs",
    "CharTokenizer",
    "TextSplits",
    "load_shakespeare",
    "lm_batch",
    "adding_problem",
    "ADDING_BASELINE_MSE",
    "words_of",
    "shuffled_word_task",
    "ImageSplits",
    "load_digits",
    "balanced_subset",
]
