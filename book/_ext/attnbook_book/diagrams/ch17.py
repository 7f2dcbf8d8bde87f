"""Chapter 17, from a model of text to an assistant: the chat template and the loss mask, a DPO pair through
the policy and the frozen reference, a GRPO group, and InstructGPT's three stages."""

from __future__ import annotations

from . import diagram
from .svg import SMALL, Diagram

SPECIAL_W = {"user": 50, "end": 40, "assistant": 84}


@diagram
def chat_template() -> Diagram:
    d = Diagram("chat_template", 720, 300, "The chat template and the loss mask of one turn")
    cells = [("user", True, False)]
    cells += [(c, False, False) for c in "reverse oak"]
    cells += [("end", True, False), ("assistant", True, False)]
    cells += [(c, False, True) for c in "kao"] + [("end", True, True)]
    x, w, xs = 96, 22, []
    for label, special, _ in cells:
        width = SPECIAL_W[label] if special else w
        xs.append((x, width))
        x += width + 2
    d.text(12, 96, "tokens", anchor="start")
    d.text(12, 176, "loss", anchor="start")
    d.text(12, 196, "mask", anchor="start")
    for (label, special, answer), (x0, width) in zip(cells, xs):
        shown = "\u2423" if label == " " else label
        d.box(x0, 80, width, 32, shown, shape="tensor", role="param" if special else None, size=SMALL)
        if answer:
            d.box(x0, 170, width, 32, shape="tensor", role="grad")
        else:
            d.grid(x0, 170, 1, 1, (width, 32), blocked=[[True]])
    user_end = xs[12][0] + xs[12][1]
    answer_start = xs[14][0]
    d.brace(xs[0][0], 64, user_end, 64, "the user's turn: no loss", side=-1)
    d.brace(answer_start, 64, xs[-1][0] + xs[-1][1], 64, "the answer", side=-1)
    d.arrow([(xs[13][0] + 42, 114), (xs[13][0] + 42, 140), (answer_start + 11, 140), (answer_start + 11, 168)],
            role="grad", radius=6)  # fmt: skip
    d.text(answer_start - 8, 230, "a loss, and a gradient: the 4 answer tokens", anchor="end", size=SMALL, role="grad")
    d.text(xs[0][0], 262, "the special tokens (brown) are 3 new rows of the embedding:", anchor="start", size=SMALL)
    d.text(xs[0][0], 282, "no typed text can produce them", anchor="start", size=SMALL, muted=True)
    return d


@diagram
def dpo_pair() -> Diagram:
    d = Diagram("dpo_pair", 720, 430, "A preference pair through the policy and the frozen reference")
    x_prompt = d.box(20, 190, 120, 50, ["prompt $x$", ("reverse oak", SMALL)], shape="tensor")
    win = d.box(20, 80, 120, 50, ["chosen $y_w$", ("kao (right)", SMALL)], shape="tensor")
    lose = d.box(20, 300, 120, 50, ["rejected $y_l$", ("koa (wrong)", SMALL)], shape="tensor")
    policy = d.box(230, 110, 150, 60, ["policy $\\pi_\\theta$", ("trained", SMALL)], shape="layer")
    ref = d.box(230, 260, 150, 60, ["reference $\\pi_{\\mathrm{ref}}$", ("frozen copy", SMALL)], shape="layer",
                dashed=True)  # fmt: skip
    for src in (win, x_prompt, lose):
        d.arrow([src.right, (190, src.cy), (190, policy.cy), policy.left], radius=6)
        d.arrow([src.right, (190, src.cy), (190, ref.cy), ref.left], radius=6)
    d.dot(190, x_prompt.cy)
    lp = d.box(420, 92, 130, 96, ["$\\log \\pi_\\theta(y_w)$", "$\\log \\pi_\\theta(y_l)$"], shape="tensor", size=SMALL)
    lr = d.box(420, 242, 130, 96, ["$\\log \\pi_{\\mathrm{ref}}(y_w)$", "$\\log \\pi_{\\mathrm{ref}}(y_l)$"],
               shape="tensor", size=SMALL)  # fmt: skip
    d.arrow([policy.right, lp.left])
    d.arrow([ref.right, lr.left])
    margin = d.box(590, 180, 110, 70, ["margin", ("$\\beta(\\Delta_w - \\Delta_l)$", SMALL)], shape="op")
    d.arrow([lp.right, (570, lp.cy), (570, margin.cy - 12), (margin.x, margin.cy - 12)], radius=6)
    d.arrow([lr.right, (570, lr.cy), (570, margin.cy + 12), (margin.x, margin.cy + 12)], radius=6)
    loss = d.box(590, 40, 110, 50, ["loss", ("$-\\log \\sigma(\\cdot)$", SMALL)], shape="op")
    d.arrow([margin.top, loss.bottom])
    d.arrow([(loss.x, loss.cy), (305, loss.cy), policy.top], role="grad", dashed=True, radius=8)
    d.text(450, 52, "gradient: the policy only", size=SMALL, role="grad")
    d.text(465, 380, "$\\Delta = \\log \\pi_\\theta - \\log \\pi_{\\mathrm{ref}}$ of one answer:", size=SMALL)
    d.text(465, 404, "its implicit reward, divided by $\\beta$", size=SMALL, muted=True)
    return d


@diagram
def grpo_group() -> Diagram:
    d = Diagram("grpo_group", 720, 360, "A GRPO group: answers, rewards from a program, advantages")
    q = d.box(20, 150, 130, 56, ["prompt $q$", ("reverse oak", SMALL)], shape="tensor")
    pol = d.box(176, 146, 130, 64, ["policy", ("samples $G = 4$", SMALL)], shape="layer")
    d.arrow([q.right, pol.left])
    answers = [("kao", 1), ("koa", 0), ("kao", 1), ("oka", 0)]
    adv = ["+0.87", "\u22120.87", "+0.87", "\u22120.87"]
    d.text(390, 30, "answers $o_i$", size=SMALL, muted=True)
    d.text(510, 30, "reward $r_i$", size=SMALL, muted=True)
    d.text(630, 30, "advantage $A_i$", size=SMALL, muted=True)
    for i, ((text, r), a) in enumerate(zip(answers, adv)):
        y = 56 + i * 62
        o = d.box(340, y, 100, 40, text, shape="tensor")
        d.arrow([pol.right, (320, pol.cy), (320, o.cy), o.left], radius=6)
        rew = d.box(480, y, 60, 40, str(r), shape="tensor")
        d.arrow([o.right, rew.left])
        A = d.box(590, y, 84, 40, a, shape="tensor")
        d.arrow([rew.right, A.left])
    d.text(510, 320, "a program checks: is $o_i$ the word reversed?", size=SMALL)
    d.text(520, 344, "$A_i = (r_i - 0.5) / 0.58$: mean 0.5, std 0.58 of the group", size=SMALL, muted=True)
    return d


@diagram
def instructgpt_stages() -> Diagram:
    d = Diagram("instructgpt_stages", 720, 440, "InstructGPT's three stages and where this chapter's methods sit")
    d.text(360, 20, "InstructGPT (Ouyang et al., 2022)", bold=True)
    cols = [20, 255, 490]
    titles = ["1. supervised fine-tuning", "2. a reward model", "3. reinforcement learning"]
    data = [
        ["people write answers", ("to prompts", SMALL)],
        ["people rank answers", ("of the model", SMALL)],
        ["prompts; the model", ("answers, is scored", SMALL)],
    ]
    models = [
        ["SFT model", ("next-token loss", SMALL)],
        ["reward model", ("learns the rankings", SMALL)],
        ["PPO policy", ("reward $-$ KL from SFT", SMALL)],
    ]
    boxes = []
    for x, title, data_label, model_label in zip(cols, titles, data, models):
        d.text(x + 105, 56, title, size=SMALL, bold=True)
        src = d.box(x, 74, 210, 52, data_label, shape="tensor")
        m = d.box(x, 160, 210, 56, model_label, shape="layer")
        d.arrow([src.bottom, m.top])
        boxes.append(m)
    d.arrow([boxes[0].right, boxes[1].left])
    d.arrow([boxes[1].right, boxes[2].left])
    d.text(20, 250, "in this chapter:", anchor="start", bold=True)
    ours = [
        (cols[0], ["instruction tuning (17)", ("a chat template, the loss", SMALL), ("on the answer only", SMALL)]),
        (cols[1], ["DPO (17.1)", ("stages 2 and 3 in one loss", SMALL), ("on ranked pairs", SMALL)]),
        (cols[2], ["GRPO (17.2)", ("a program's reward,", SMALL), ("no reward model", SMALL)]),
    ]
    for x, label in ours:
        d.box(x, 290, 210, 84, label, shape="panel")
    d.arrow([(cols[0] + 180, 218), (cols[0] + 180, 288)], dashed=True)
    d.arrow([(cols[1] + 180, 218), (cols[1] + 180, 288)], dashed=True)
    d.arrow([(cols[2] + 180, 218), (cols[2] + 180, 288)], dashed=True)
    d.text(
        360,
        410,
        "DPO and GRPO both start from the instruction-tuned model, as PPO starts from SFT",
        size=SMALL,
        muted=True,
    )
    return d
