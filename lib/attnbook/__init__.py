"""attnbook: the library of *Attention, Step by Step*.

One concept per module; each chapter of the book builds a concept from scratch, checks it against
the library (or PyTorch), then uses the library from there on.
"""

__version__ = "0.2.0"
