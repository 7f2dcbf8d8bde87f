"""What each exercise's answer takes: the declarations the oracle's inputs are made from (see ``inputs``).

One entry per checker. A function answer is declared by its arguments, in the batch shapes its exercise
promises (``*b`` where any batch is allowed); ``grad`` says that its gradients are part of its behaviour.
Answers that a declaration cannot describe (lists of tensors, dictionaries, graphs, modules, a model to
sample from) name a small generator below. A class answer gives the arguments of its constructor and its
forward's input; a number gives the precision its question states, as the arguments of
``attnbook.exercises.number_tolerance`` (``significant=3``: three significant figures; nothing: the exact
value), and its checker must accept exactly that (``tests/exercises/test_mutation.py``).
A checker without an entry is reported as such: a new exercise needs one line here.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import torch

from .inputs import Input, battery


@dataclass(frozen=True)
class Spec:
    args: str = ""  # the declaration of a function's arguments, or of a class's forward input
    grad: bool | tuple = False  # compare gradients too: with respect to every float argument, or these positions
    table: tuple = ()  # explicit argument tuples (scalar answers), instead of or besides a declaration
    custom: str = ""  # the name of a generator below
    init: tuple = ()  # a class: its constructor's arguments, one tuple per configuration
    number: dict = field(default_factory=dict)  # a number: the precision its question states (none: exact)
    integers: bool = False  # a count the exercise says is an int: a float of the same value differs
    bind: tuple = ()  # a class: the size symbols its constructor's first arguments fix, e.g. ("d",)
    even: tuple = ()
    at_least: dict = field(default_factory=dict)

    def inputs(self, init: tuple = ()) -> list[Input]:
        out = [Input(tuple(args), f"table {args}") for args in self.table]
        if self.custom:
            out += CUSTOM[self.custom]()
        if self.args:
            fixed = dict(zip(self.bind, init)) if init else None
            out += battery(self.args, even=self.even, at_least=self.at_least, fixed=fixed)
        return out


SPECS: dict[str, Spec] = {
    # 01
    "check_input_gradient": Spec("W_xh: f[h, d]; W_hh: f[h, h] small; T: int(t)"),
    "check_step_jacobian": Spec("h_prev: f[h]; x: f[d]; W_xh: f[h, d]; W_hh: f[h, h]; b: f[h]"),
    "check_gradient_norm": Spec(number={"significant": 2}),
    "check_clip_grad_norm": Spec(custom="clip"),
    # 02
    "check_lstm_step": Spec(
        "x: f[n, d]; h: f[n, k]; c: f[n, k]; W_x: f[4*k, d]; W_h: f[4*k, k]; b: f[4*k]", grad=(0, 1, 2)
    ),
    "check_gru_step": Spec(
        "x: f[n, d]; h: f[n, k]; W_x: f[3*k, d]; W_h: f[3*k, k]; b_x: f[3*k]; b_h: f[3*k]", grad=(0, 1)
    ),
    "check_forget_bias": Spec(number={"significant": 3}),
    "check_gru_parameters": Spec(),
    # 03
    "check_bahdanau_attention": Spec(
        "s_prev: f[n, e]; H: f[n, t, c]; mask: mask[n, t]; W_1: f[a, e]; W_2: f[a, c]; v: f[a] huge", grad=True
    ),
    "check_shift_targets": Spec(custom="shift_targets"),
    "check_bottleneck_bits": Spec(number={"significant": 3}),
    "check_beam_step": Spec("scores: f[n]; log_probs: f[n, v]; k: int(k)"),
    # 04
    "check_attention": Spec("q: f[*b, n, d]; k: f[*b, m, d]; v: f[*b, m, e]", grad=True),
    "check_masked_attention": Spec(
        "q: f[*b, n, d] large; k: f[*b, m, d] large; v: f[*b, m, e]; mask: mask[*b, n, m]", grad=True
    ),
    "check_softmax_temperature": Spec("scores: f[*b, n] large shift; temperature: float(0.25, 1.0, 4.0)", grad=True),
    "check_score_std": Spec(),
    # 05
    "check_cross_attention": Spec(
        "X: f[*b, n, d]; Z: f[*b, m, e]; W_q: f[d, k]; W_k: f[e, k]; W_v: f[e, u]", grad=True
    ),
    "check_sinusoidal_2d": Spec("height: int(h); width: int(w); d_model: int(4*q)"),
    "check_shift": Spec("pe: f[n, 2*h]; k: value(1, 3, -2)"),
    "check_pe_self_dot": Spec(),
    # 06
    "check_causal_mask": Spec(table=((1,), (2,), (5,), (8,))),
    "check_decoder_mask": Spec("lengths: lengths[n] <= t; T: int(t)"),
    "check_safe_masked_softmax": Spec("scores: f[*b, n, m] large shift; mask: mask0[*b, n, m]", grad=True),
    "check_allowed_count": Spec(),
    # 07
    "check_split_heads": Spec("x: f[n, t, h*k]; n_heads: int(h)"),
    "check_multi_head_attention": Spec(
        "x: f[n, t, h*k]; W_q: f[h*k, h*k]; W_k: f[h*k, h*k]; W_v: f[h*k, h*k]; W_o: f[h*k, h*k]; n_heads: int(h)",
        grad=(0,),
    ),
    "check_parameter_count": Spec(),
    "check_weights_memory": Spec(),
    # 08
    "check_layer_norm": Spec("x: f[*b, d]; gamma: f[d]; beta: f[d]; eps: float(1e-5, 1e-2)", grad=True),
    "check_post_norm_block": Spec(custom="post_norm_block"),
    "check_lrate": Spec(table=tuple(itertools.product((1, 10, 3999, 4000, 4001, 10**5), (512, 64), (4000, 100)))),
    "check_gpt_parameters": Spec(table=((65, 256, 6, 384), (50257, 1024, 12, 768), (10, 7, 1, 4), (3, 2, 2, 8))),
    "check_forward_flops": Spec(),
    # 09
    "check_attention_memory": Spec(),
    "check_attention_flops": Spec(),
    "check_online_softmax_update": Spec(custom="online_softmax"),
    "check_merge_partial_attention": Spec(
        "o1: f[*b, n, d]; lse1: f[*b, n] large; o2: f[*b, n, d]; lse2: f[*b, n] large", grad=True
    ),
    "check_causal_linear_attention": Spec("q: f[t, d]; k: f[t, d]; v: f[t, e]", grad=True),
    # 10
    "check_patchify": Spec("images: f[n, c, p*h, p*w]; patch_size: int(p)"),
    "check_n_tokens": Spec(
        table=((224, 224, 16), (32, 48, 8), (28, 20, 4), (16, 16, 16), (384, 224, 32)), integers=True
    ),
    "check_vit_large_parameters": Spec(),
    "check_class_attention_map": Spec(custom="class_attention"),
    # 11
    "check_rmsnorm": Spec("x: f[*b, d]; weight: f[d]; eps: float(1e-6, 1e-2)", grad=True),
    "check_swiglu": Spec("x: f[*b, d]; W_1: f[d, h]; W_2: f[d, h]; W_3: f[h, d]", grad=True),
    "check_rope": Spec("x: f[*b, t, 2*h]; offset: value(0, 3, 1000)", grad=True, custom="rope_far"),
    "check_kv_cache_bytes": Spec(),
    # 12
    "check_causal_self_attention": Spec("x: f[n, t, d] large", init=((16, 4), (12, 3), (8, 1)), bind=("d",)),
    "check_block": Spec("x: f[n, t, d]", init=((16, 4), (12, 2)), bind=("d",)),
    "check_mini_gpt": Spec("idx: long[n, t] < v", init=((13, 8, 16, 4, 2), (7, 5, 8, 2, 1)), bind=("v",)),
    "check_next_token_probs": Spec(
        "logits: f[n, v] large shift; temperature: float(1.0, 0.5, 2.0); top_k: value(None, 1, 3)", grad=True
    ),
    "check_generate": Spec(custom="generate"),
    # 13
    "check_count_pairs": Spec(custom="count_pairs"),
    "check_family_masks": Spec(table=((1, 1), (3, 5), (6, 2), (4, 4))),
    "check_bert_corruption": Spec(custom="bert"),
    "check_lora_parameters": Spec(),
    # 14
    "check_training_flops": Spec(table=((4, 128, 2_000_000), (1, 16, 3), (12, 768, 3 * 10**11), (3, 7, 100))),
    "check_fit_exponent": Spec(custom="fit_exponent"),
    "check_compute_optimal": Spec(table=((5.76e23, 20.0), (1e18, 20.0), (3e14, 5.0), (6.0, 1.0), (1000.0, 20.0))),
    "check_loss_scale": Spec(),
    "check_attention_entropy": Spec("weights: f[n, h, t, t] prob0"),  # values: no gradient is right at 0
    # 15
    "check_masked_mean": Spec("h: f[n, m, d]; keep: mask0[n, m]", grad=True),
    "check_adjacency_mask": Spec(custom="edges"),
    "check_shortest_paths": Spec(custom="graphs"),
    "check_spectrogram_shape": Spec(
        table=((2016, 64, 32), (16000, 400, 160), (1000, 256, 100), (17, 8, 3), (48, 16, 4)), integers=True
    ),
    "check_clip_loss": Spec("image_embeddings: f[n, e]; text_embeddings: f[n, e]; scale: float(1.0, 10.0)", grad=True),
    "check_agent_mask": Spec(table=((2, 3), (3, 4), (1, 5), (4, 1), (1, 1))),
    # 16
    "check_prefix_matching": Spec("weights: f[n, h, 2*l, 2*l] prob"),
    "check_without_head": Spec("W_o: f[d, h*k]; head: value(0, 1); n_heads: int(h)", at_least={"h": 2}),
    "check_ov_circuit": Spec(
        "E: f[v, d]; W_v: f[h*k, d]; W_o: f[d, h*k]; W_U: f[v, d]; head: value(0, 1); n_heads: int(h)",
        at_least={"h": 2},
    ),
    "check_rollout": Spec(custom="rollout"),
    # 17
    "check_sft_targets": Spec("ids: long[n, t] < v; answer_mask: mask0[n, t]", at_least={"t": 2}),
    "check_dpo_loss": Spec(
        "pc: f[n] large; pr: f[n] large; rc: f[n]; rr: f[n]; beta: float(0.1, 1.0, 0.01)", grad=(0, 1)
    ),
    "check_group_advantages": Spec("rewards: f[n, g]", custom="binary_rewards", at_least={"g": 2}),
    "check_clipped_objective": Spec("ratio: f[n, t] pos; advantages: f[n]; clip: float(0.2, 0.1)", grad=(0,)),
}


# --- generators for what a declaration cannot say -----------------------------------------------------------


def _g(seed):
    return torch.Generator().manual_seed(seed)


def _clip():
    out = []
    for seed, (dtype, scale, max_norm) in enumerate(
        itertools.product((torch.float32, torch.float64), (10.0, 0.01, 1.0), (1.0, 2.5))
    ):
        g = _g(seed)
        shapes = [(3, 4), (5,), (2, 2, 2)][: 1 + seed % 3]
        grads = [torch.randn(s, generator=g, dtype=dtype) * scale for s in shapes]
        out.append(Input((grads, max_norm), f"{len(grads)} tensors, {dtype}, scale {scale}, max_norm {max_norm}"))
    zeros = [torch.zeros(3, 4, dtype=torch.float64), torch.zeros(5, dtype=torch.float64)]
    out.append(Input((zeros, 1.0), "a zero gradient"))  # small enough: it comes back unchanged
    return out


def _shift_targets():
    out = []
    for seed, (B, T) in enumerate([(1, 4), (3, 5), (2, 1), (4, 6)]):
        g = _g(seed)
        lengths = torch.randint(0, T + 1, (B,), generator=g)
        lengths[0] = T
        targets = torch.randint(4, 20, (B, T), generator=g)
        targets[torch.arange(T) >= lengths[:, None]] = 0  # padded after each sentence
        out.append(Input((targets, lengths), f"B={B}, T={T}"))
    return out


def _rope_far():
    """Rows far into a long context, in float64 only (float32 cannot hold the angle at position 100,000)."""
    g = _g(0)
    return [
        Input((torch.randn(*shape, generator=g, dtype=torch.float64), 100_000), f"{shape} at 100,000")
        for shape in [(3, 4), (2, 3, 8)]
    ]


def _post_norm_block():
    from attnbook.blocks import EncoderBlock

    out = []
    for seed, (B, T, dtype) in enumerate([(2, 5, torch.float64), (1, 3, torch.float32), (3, 1, torch.float64)]):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(100 + seed)
            block = EncoderBlock(8, 2, 16, norm_position="post").to(dtype).eval()
            with torch.no_grad():
                for norm in block.norms:
                    norm.weight.uniform_(0.5, 1.5)
                    norm.bias.normal_(0.0, 0.3)
        x = torch.randn(B, T, 8, generator=_g(seed), dtype=dtype)
        out.append(Input((x, block.self_attn, block.ffn, block.norm_1, block.norm_2), f"B={B}, T={T}, {dtype}"))
    return out


def _online_softmax():
    out = []
    for seed, (shape, dtype) in enumerate([((3,), torch.float64), ((2, 3), torch.float32), ((), torch.float64)]):
        g = _g(seed)
        x1 = torch.randn(*shape, 4, generator=g, dtype=dtype)
        m0 = torch.full(shape, float("-inf"), dtype=dtype)
        out.append(Input((m0, torch.zeros(shape, dtype=dtype), x1), f"first block {shape}"))
        m = x1.amax(-1)
        l_ = torch.exp(x1 - m.unsqueeze(-1)).sum(-1)
        for scale in (1.0, 1000.0):
            x2 = torch.randn(*shape, 5, generator=g, dtype=dtype) * scale + 1.5
            out.append(Input((m, l_, x2), f"later block {shape} {dtype} scale {scale}"))
        masked = torch.full((*shape, 3), float("-inf"), dtype=dtype)  # a block entirely masked
        out.append(Input((m0, torch.zeros(shape, dtype=dtype), masked), f"masked first block {shape}"))
        out.append(Input((m, l_, masked), f"masked later block {shape}"))
    return out


def _class_attention():
    out = []
    for seed, (B, H, grid, dtype) in enumerate(
        [(2, 3, (2, 3), torch.float64), (1, 2, (3, 3), torch.float32), (2, 1, (4, 2), torch.float64)]
    ):
        T = 1 + grid[0] * grid[1]
        w = torch.softmax(torch.randn(B, H, T, T, generator=_g(seed), dtype=dtype) * 2, dim=-1)
        out.append(Input((w, grid), f"B={B}, H={H}, grid {grid}"))
    return out


def _generate():
    from attnbook.models import GPT, TransformerConfig

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        model = GPT(TransformerConfig(vocab_size=11, block_size=5, n_layers=1, n_heads=2, d_model=8)).eval()
    out = []
    for seed, (B, T, n, temperature, top_k) in enumerate(
        [(1, 2, 4, 1.0, None), (2, 7, 3, 0.7, 3), (2, 3, 5, 2.0, 1), (1, 5, 2, 1.0, 5)]
    ):
        idx = torch.randint(11, (B, T), generator=_g(seed))
        args = (model, idx, n, 5, temperature, top_k, _g(50 + seed))
        out.append(Input(args, f"B={B}, T={T}, {n} new, temperature {temperature}, top_k {top_k}"))
    return out


def _count_pairs():
    words = [
        {("l", "o", "w"): 5, ("l", "o", "w", "e", "r"): 2},
        {("a", "a", "a", "a"): 3, ("b",): 4, ("a", "b", "a", "b"): 1},
        {("x", "y"): 1},
        {},
    ]
    return [Input((w,), f"words {w}") for w in words]


def _bert():
    out = []
    for seed, shape in enumerate([(2, 8), (1, 5), (3, 4)]):
        g = _g(seed)
        u = torch.rand(shape, generator=g)
        u.view(-1)[:3] = torch.tensor([0.8, 0.9, 0.0])  # the bands' edges
        args = (
            torch.randint(3, 40, shape, generator=g),
            torch.rand(shape, generator=g) < 0.6,
            u,
            torch.randint(3, 40, shape, generator=g),
            1 + seed,
        )
        out.append(Input(args, f"shape {shape}"))
    return out


def _fit_exponent():
    import numpy as np

    out = []
    for alpha, floor, n_c, points in ((0.3, 1.5, 2e3, 7), (0.076, 0.0, 8.8e13, 4), (0.5, 0.8, 1e4, 3)):
        n = np.geomspace(1e3, 1e6, points)
        loss = floor + (n_c / n) ** alpha
        out.append(Input((n.tolist(), loss.tolist(), floor), f"alpha {alpha}, floor {floor}"))
    return out


def _edges():
    cases = [([(0, 1), (1, 2)], 3), ([(2, 0), (3, 1)], 5), ([], 2), ([(0, 0), (1, 0)], 2), ([(0, 3)], 4)]
    return [Input(c, f"edges {c[0]}, {c[1]} nodes") for c in cases]


def _graphs():
    from attnbook import graphs

    out = []
    for edges, n in [
        ([(0, 1), (1, 2), (2, 3)], 5),
        ([(0, 1), (1, 2), (2, 0)], 3),
        ([], 2),
        ([(0, 1)], 1 + 1),
        ([(0, 2), (2, 4), (1, 3)], 6),
        ([(i, i + 1) for i in range(9)], 10),  # a path: its ends n - 1 edges apart
    ]:
        out.append(Input((graphs.adjacency_from_edges(edges, n),), f"edges {edges}, {n} nodes"))
    return out


def _rollout():
    out = []
    for seed, (B, H, T, L, dtype) in enumerate(
        [(2, 2, 4, 2, torch.float64), (1, 3, 5, 3, torch.float32), (2, 1, 3, 1, torch.float64)]
    ):
        g = _g(seed)
        ws = [torch.softmax(torch.randn(B, H, T, T, generator=g, dtype=dtype) * 2, -1) for _ in range(L)]
        out.append(Input((ws,), f"B={B}, H={H}, T={T}, {L} layers"))
    return out


def _binary_rewards():
    """Rewards of a verifier, 0 or 1: groups all right, all wrong, and mixed."""
    out = []
    for seed, (B, G, dtype) in enumerate([(4, 4, torch.float32), (3, 8, torch.float64), (1, 2, torch.float32)]):
        r = (torch.rand(B, G, generator=_g(seed)) < 0.5).to(dtype)
        r[0] = 1.0  # a group all right: advantages 0
        if B > 1:
            r[1] = 0.0  # and one all wrong
        out.append(Input((r,), f"0/1 rewards B={B}, G={G}, {dtype}"))
    return out


CUSTOM = {
    "clip": _clip,
    "shift_targets": _shift_targets,
    "post_norm_block": _post_norm_block,
    "rope_far": _rope_far,
    "online_softmax": _online_softmax,
    "class_attention": _class_attention,
    "generate": _generate,
    "count_pairs": _count_pairs,
    "bert": _bert,
    "fit_exponent": _fit_exponent,
    "edges": _edges,
    "graphs": _graphs,
    "rollout": _rollout,
    "binary_rewards": _binary_rewards,
}
