"""What an error message means for the learner's code: a few of PyTorch's and Python's messages, in the
words of the mistakes that cause them (a matrix product whose sizes do not line up, shapes that do not
broadcast, a dim the input does not have, float32 and float64 mixed, ...)."""

from __future__ import annotations

__all__ = ["error"]

_ERRORS = [
    (
        (
            "cannot be multiplied",
            "size mismatch",
            "Expected size for first two dimensions of batch2",
            "mismatch in dimension",
        ),
        "the sizes of a matrix product do not line up: one operand needs a transpose (k.transpose(-2, -1)), "
        "or the product is taken over the wrong dimension",
    ),
    (
        ("must match the size of tensor", "The size of tensor a", "not broadcastable", "cannot broadcast"),
        "two tensors whose shapes do not broadcast together: a dimension is missing (keepdim=True on a "
        "reduction, x[..., None]) or is in the wrong place",
    ),
    (
        ("Dimension out of range",),
        "a dim this input does not have: count dimensions from the end (dim=-1, -2) so that the code works "
        "with and without a batch",
    ),
    (
        ("is invalid for input of size",),
        "a view or reshape to a shape with another number of entries: compute the sizes from the input's shape",
    ),
    (
        ("view size is not compatible",),
        "view() of a tensor that is not contiguous (after a transpose): use .reshape(), or .contiguous() first",
    ),
    (
        (
            "expected scalar type",
            "same dtype",
            "Found dtype",
            "expected both",
            "dtype mismatch",
            "but got Double",
            "but got Float",
        ),
        "float32 and float64 tensors are mixed: create new tensors with dtype=x.dtype (and device=x.device)",
    ),
    (
        ("modified by an inplace operation", "a leaf Variable that requires grad"),
        "an in-place change of a tensor autograd needs: use operations that return a new tensor",
    ),
    (
        ("too many values to unpack", "not enough values to unpack"),
        "a shape or a result unpacked into the wrong number of names: this case's tensors have another number "
        "of dimensions than your code assumes (a batch dimension?)",
    ),
    (
        ("index out of range", "out of bounds", "list index out of range"),
        "an index past the end of a dimension or a list: a range or an index that is off by one, or a size "
        "taken from the wrong dimension",
    ),
    (
        ("is not defined",),
        "a name that is not defined: a function or variable that does not exist under that name here",
    ),
    (
        ("not implemented for 'Long'", "not implemented for 'Bool'", "not implemented for 'Int'"),
        "an operation that needs floats, on integers or booleans: convert with .float() (or .to(x.dtype))",
    ),
    (
        ("division by zero",),
        "a division by zero: a count or a norm that is 0 on this case",
    ),
    (
        ('missing 1 required positional arguments: "dim"',),
        "a softmax (or another reduction) without the dimension to work along: dim=-1 for the last",
    ),
    (
        ("got (Tensor, str)", "got (str", "must be Number, not str"),
        "a string where a number is needed: write float('-inf'), not '-inf'",
    ),
    (
        ("operator.invert) is only implemented on integer and Boolean",),
        "~ on a float tensor: ~ negates a boolean mask; the tensor given here is not one (arguments in another order?)",
    ),
    (
        ("Sizes of tensors must match except in dimension",),
        "torch.cat of tensors whose other dimensions differ: concatenate along the one dimension where "
        "they differ (dim=1, or dim=-1)",
    ),
    (
        ("object cannot be interpreted as an integer", "must be tuple of ints, but found element of type float"),
        "a float where a whole number is needed (a size or an index): compute sizes with //, not /",
    ),
    (
        ("cannot be converted to Scalar",),
        "a tensor with several entries turned into one number (.item(), float(), if): a sum or norm is missing",
    ),
    (
        ("selected index k out of range",),
        "topk asks for more entries than the dimension has: check the shape it runs over",
    ),
    (
        (
            "received an invalid combination of arguments",
            "must be Tensor, not",
            "must be int, not",
            "must be tuple of ints, not",
        ),
        "a PyTorch function given an argument of the wrong type (arguments in another order, or a number "
        "where a tensor is expected)",
    ),
    (
        ("unsupported operand type", "not supported between instances", "can't multiply sequence"),
        "an operation between values of types it does not combine (a list, a tuple or None where a number "
        "or a tensor is expected)",
    ),
    (
        ("object is not callable", "object is not subscriptable", "object is not iterable", "has no attribute"),
        "a value of another type than the code expects (a number where a tensor is expected, a method called "
        "on a list, a tensor called as a function)",
    ),
]


def error(message: str) -> str | None:
    """What an error message means for the learner's code, or None."""
    for fragments, meaning in _ERRORS:
        if any(f in message for f in fragments):
            return meaning
    return None
