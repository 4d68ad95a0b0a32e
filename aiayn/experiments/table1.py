"""Table 1 of the paper ("why self-attention"), measured: per layer type, time and FLOPs against the sequence length
n at d = 512, sequential operations, and maximum path length. `aiayn table1` runs it.

    aiayn table1 [--quick] [--d 512] [--r 64] [--json OUT.json] [--plot docs/img/table1.png]

The layers here (an LSTM, a convolution, restricted attention) are not part of the model: they exist only to be
measured beside self-attention.

Layer types, each a layer mapping n vectors of width d to n vectors of width d (batch 1, fp32, forward, 1 thread):

    self-attention      Q/K/V/O projections + softmax(Q K^T / sqrt(d_k)) V, h = 8 heads (eq. 1-2)
    (its core)          eq. 1 alone on the input (no projections): the n^2 d term of the paper's complexity
    recurrent           one LSTM layer (torch.nn.LSTM for time; LoopLSTM, its maths spelled out step by step and
                        checked equal to it, for FLOPs and for the graph measurements)
    convolutional       a convolution of kernel k = 3, d -> d channels
    restricted          self-attention where position i sees only positions j with |i - j| <= r / 2, computed
                        as local attention is: blocks of r / 2 queries against their own and the two neighbouring
                        blocks of keys (3r / 2 scores per query, those outside the neighbourhood masked)

What each column measures:

    time, exponent      forward time per n (fastest of several calls); the exponent is the slope of log time
                        against log n over the largest sizes (n >= --fit-from), where the leading term shows
    FLOPs               counted by torch.utils.flop_counter (matmuls and convolutions, 2 per multiply-add) and
                        checked against the closed forms: 8nd^2 + 4n^2d, 16nd^2, 2knd^2, 8nd^2 + 6nrd
                        (n rounded up to whole blocks of r / 2 for the last)
    sequential ops      the depth of the layer's autograd graph from input to output (the longest chain of
                        operations that must run one after another), at two lengths
    max path length     the fewest layers of the kind, stacked, before the gradient of the last position's output
                        reaches the first input (d/dx_0 y_{n-1} != 0); for the recurrent layer, one layer suffices but
                        the gradient crosses recurrent steps, so what is counted is the fewest steps back through
                        which gradient must flow (truncating back-propagation through time shorter cuts x_0 off).
                        The convolution is counted both contiguous (O(n/k)) and dilated (dilation k^l, O(log_k n),
                        the paper's figure)

The crossover where self-attention gets more expensive than recurrence: the paper compares n^2 d with n d^2 (n = d);
with the projections and the LSTM's four gates counted, the FLOPs cross at n = 2d; the measured times cross where
they cross (the plot marks both).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from aiayn import files
from aiayn.experiments.paper import TABLE1

# ---------------------------------------------------------------------------------------------------------
# The layers. x: (B, n, d) -> (B, n, d).


def attention_core(q: Tensor, k: Tensor, v: Tensor, h: int, r: int | None = None) -> Tensor:
    """softmax(Q K^T / sqrt(d_k)) V over h heads; with r, position i attends to |i - j| <= r // 2 only."""
    B, n, d = q.shape
    dk = d // h
    q, k, v = (t.view(B, n, h, dk).transpose(1, 2) for t in (q, k, v))  # (B, h, n, dk)
    if r is None:
        scores = q @ k.transpose(-1, -2) / math.sqrt(dk)  # (B, h, n, n)
        return (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, n, d)
    # Blocks of w = r // 2 queries; block b sees key blocks b - 1, b, b + 1 (3w keys), of which |i - j| <= w count.
    w = max(1, r // 2)
    m = -(-n // w)  # blocks
    pad = m * w - n
    q = F.pad(q, (0, 0, 0, pad)).view(B, h, m, w, dk)
    k, v = (F.pad(t, (0, 0, w, w + pad)).view(B, h, m + 2, w, dk) for t in (k, v))
    k, v = (t.unfold(2, 3, 1).permute(0, 1, 2, 5, 3, 4).reshape(B, h, m, 3 * w, dk) for t in (k, v))  # (B,h,m,3w,dk)
    scores = q @ k.transpose(-1, -2) / math.sqrt(dk)  # (B, h, m, w, 3w)
    i = torch.arange(m * w).view(m, w, 1)  # query position
    j = (torch.arange(m).view(m, 1, 1) - 1) * w + torch.arange(3 * w).view(1, 1, 3 * w)  # key position
    scores = scores.masked_fill(((i - j).abs() > w) | (j < 0) | (j >= n), float("-inf"))
    out = (scores.softmax(-1) @ v).view(B, h, m * w, dk)[:, :, :n]  # (B, h, n, dk)
    return out.transpose(1, 2).reshape(B, n, d)


class SelfAttention(nn.Module):
    """One multi-head self-attention layer (projections included); restricted to |i - j| <= r / 2 if r is given."""

    def __init__(self, d: int, h: int = 8, r: int | None = None):
        super().__init__()
        self.h, self.r = h, r
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return self.out(attention_core(q, k, v, self.h, self.r))


class AttentionCore(nn.Module):
    """Eq. 1 alone, on the input itself: the part of self-attention whose cost is n^2 d."""

    def __init__(self, d: int, h: int = 8):
        super().__init__()
        self.h = h

    def forward(self, x: Tensor) -> Tensor:
        return attention_core(x, x, x, self.h)


class TorchLSTM(nn.Module):
    """torch.nn.LSTM (its fused kernel): what the times are taken of."""

    def __init__(self, d: int):
        super().__init__()
        self.lstm = nn.LSTM(d, d, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.lstm(x)[0]


class LoopLSTM(nn.Module):
    """The same LSTM with its recurrence written out: the input projection for all positions at once (parallel),
    then one step per position (sequential). `cut` = how many recurrent steps back gradient may flow from the end
    (None: all); the state is detached before that."""

    def __init__(self, d: int):
        super().__init__()
        self.w_ih, self.w_hh = nn.Linear(d, 4 * d), nn.Linear(d, 4 * d)

    def forward(self, x: Tensor, cut: int | None = None) -> Tensor:
        B, n, d = x.shape
        gates_x = self.w_ih(x)  # (B, n, 4d)
        h = c = x.new_zeros(B, d)
        outs = []
        for t in range(n):
            if cut is not None and t == n - cut:
                h, c = h.detach(), c.detach()
            i, f, g, o = (gates_x[:, t] + self.w_hh(h)).chunk(4, dim=-1)  # torch's gate order
            c = f.sigmoid() * c + i.sigmoid() * g.tanh()
            h = o.sigmoid() * c.tanh()
            outs.append(h)
        return torch.stack(outs, dim=1)

    @classmethod
    def like(cls, lstm: nn.LSTM) -> LoopLSTM:
        """A LoopLSTM with the weights of a one-layer torch.nn.LSTM (its two biases summed into one)."""
        m = cls(lstm.hidden_size)
        with torch.no_grad():
            m.w_ih.weight.copy_(lstm.weight_ih_l0)
            m.w_ih.bias.copy_(lstm.bias_ih_l0)
            m.w_hh.weight.copy_(lstm.weight_hh_l0)
            m.w_hh.bias.copy_(lstm.bias_hh_l0)
        return m


class Convolution(nn.Module):
    """A 1-d convolution of kernel k over positions, d -> d channels: centred ('same' padding), or causal (position i
    sees i, i - dilation, ..., i - (k - 1) dilation: the stacks of WaveNet and ByteNet that reach n in log_k n)."""

    def __init__(self, d: int, k: int = 3, dilation: int = 1, causal: bool = False):
        super().__init__()
        span = dilation * (k - 1)
        self.pad = (span, 0) if causal else (span // 2, span - span // 2)
        self.conv = nn.Conv1d(d, d, k, dilation=dilation)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(F.pad(x.transpose(1, 2), self.pad)).transpose(1, 2)  # (B, d, n) for Conv1d


def closed_form_flops(kind: str, n: int, d: int, k: int = 3, r: int = 64) -> int:
    """The matmul/convolution FLOPs of one forward (2 per multiply-add), by hand."""
    w = max(1, r // 2)
    n_blocks = -(-n // w) * w  # restricted attention works on whole blocks of w queries
    return {"self-attention": 8 * n * d * d + 4 * n * n * d,  # 4 projections n d^2; Q K^T and A V n^2 d each
            "self-attention core": 4 * n * n * d,
            "recurrent": 16 * n * d * d,  # 4 gates x (input + recurrent) d^2 per position
            "convolutional": 2 * k * n * d * d,
            # blocks of w = r / 2 queries against 3w keys (2w + 1 of them in the neighbourhood): 2 x 2 n 3w d
            "restricted": 8 * n * d * d + 12 * n_blocks * w * d}[kind]


KINDS = ("self-attention", "recurrent", "convolutional", "restricted")


def make_layer(kind: str, d: int, r: int, timing: bool = True) -> nn.Module:
    """The layer of a kind; the recurrent one is torch's for timing and the written-out loop for counting."""
    if kind == "self-attention":
        return SelfAttention(d)
    if kind == "self-attention core":
        return AttentionCore(d)
    if kind == "recurrent":
        return TorchLSTM(d) if timing else LoopLSTM(d)
    if kind == "convolutional":
        return Convolution(d)
    if kind == "restricted":
        return SelfAttention(d, r=r)
    raise ValueError(kind)


# ---------------------------------------------------------------------------------------------------------
# Measurements.


def time_forward(layer: nn.Module, n: int, d: int, min_seconds: float = 0.3, min_reps: int = 3) -> float:
    """Seconds of one forward on a (1, n, d) input: the fastest of at least min_reps calls and min_seconds, after a
    warm-up call (the fastest, not the median: on a shared machine the other calls measure the neighbours too)."""
    x = torch.randn(1, n, d)
    times = []
    with torch.inference_mode():
        layer(x)
        start = time.perf_counter()
        while len(times) < min_reps or time.perf_counter() - start < min_seconds:
            t0 = time.perf_counter()
            layer(x)
            times.append(time.perf_counter() - t0)
    return min(times)


def count_flops(layer: nn.Module, n: int, d: int) -> int:
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        layer(torch.randn(1, n, d))
    return counter.get_total_flops()


def graph_depth(layer: nn.Module, n: int, d: int) -> int:
    """The longest chain of operations in the layer's autograd graph (output back to the leaves): how many must run
    one after another."""
    root = layer(torch.randn(1, n, d, requires_grad=True)).sum().grad_fn
    depth: dict = {}
    stack = [root]
    while stack:  # iterative post-order: the graph of a long recurrence is too deep for recursion
        fn = stack[-1]
        children = [c for c, _ in fn.next_functions if c is not None]
        pending = [c for c in children if c not in depth]
        if pending:
            stack.extend(pending)
        else:
            depth[stack.pop()] = 1 + max((depth[c] for c in children), default=0)
    return depth[root]


def _reaches(layers: list[nn.Module], n: int, d: int, **kw) -> bool:
    """Whether the last position's output depends on the first input (its gradient there is not exactly 0). In fp64:
    through hundreds of layers or steps a real gradient shrinks below fp32's range (~1e-45) and would read as 0."""
    x = torch.randn(1, n, d, dtype=torch.float64, requires_grad=True)
    y = x
    for layer in layers:
        y = layer(y, **kw)
    y[0, -1].sum().backward()
    return bool(x.grad[0, 0].abs().sum() > 0)


def _fewest(reaches: Callable[[int], bool], start: int = 1, limit: int = 1 << 14) -> int:
    """The smallest m >= start with reaches(m), for a monotone `reaches`: doubling, then bisection."""
    hi = start
    while not reaches(hi):
        hi *= 2
        if hi > limit:
            raise RuntimeError(f"no path within {limit} layers or steps")
    lo = max(start, hi // 2)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if reaches(mid) else (mid + 1, hi)
    return lo


def path_length(kind: str, n: int, d: int = 8, k: int = 3, r: int = 64) -> int:
    """The fewest layers of `kind` (for "recurrent": recurrent steps) through which y_{n-1} reaches x_0."""
    torch.manual_seed(0)
    if kind == "recurrent":  # one layer; the fewest steps back through which gradient must flow
        lstm = LoopLSTM(d).double()
        return _fewest(lambda m: m >= n or _reaches([lstm], n, d, cut=m))
    layers: list[nn.Module] = []

    def layer(depth: int) -> nn.Module:  # the depth-th layer of the stack (from 1)
        if kind in ("self-attention", "restricted"):
            return SelfAttention(d, h=2, r=r if kind == "restricted" else None)
        if kind == "convolutional":  # contiguous kernels
            return Convolution(d, k)
        if kind == "convolutional (dilated)":  # causal, dilation 1, k, k^2, ...
            return Convolution(d, k, dilation=k ** (depth - 1), causal=True)
        raise ValueError(kind)

    def reaches(depth: int) -> bool:
        while len(layers) < depth:
            layers.append(layer(len(layers) + 1).double())
        return _reaches(layers[:depth], n, d)

    return _fewest(reaches)


def fit_exponent(ns: list[int], values: list[float]) -> float:
    """Least-squares slope of log(value) against log(n)."""
    xs, ys = [math.log(n) for n in ns], [math.log(v) for v in values]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / sum((a - mx) ** 2 for a in xs)


def crossover(ns: list[int], a: list[float], b: list[float]) -> float | None:
    """The n (log-log interpolated) where a, below b, first reaches it; None if it does not within the range."""
    for i in range(1, len(ns)):
        if a[i - 1] < b[i - 1] and a[i] >= b[i]:
            g0, g1 = math.log(a[i - 1] / b[i - 1]), math.log(a[i] / b[i])
            t = g0 / (g0 - g1)
            return math.exp(math.log(ns[i - 1]) + t * (math.log(ns[i]) - math.log(ns[i - 1])))
    return None


# ---------------------------------------------------------------------------------------------------------
# The table.

def measure(ns: list[int], d: int, r: int, depth_ns: list[int], path_ns: list[int], fit_from: int,
            say: Callable[[str], None] = print) -> dict:
    """Every measurement of Table 1; a dict that `format_table` and `plot` read."""
    torch.manual_seed(0)
    res: dict = {"d": d, "r": r, "k": 3, "ns": ns, "fit_from": fit_from, "threads": torch.get_num_threads(),
                 "torch": torch.__version__, "time": {}, "flops": {}, "depth": {}, "path": {}}
    for kind in (*KINDS, "self-attention core"):
        timed, counted = make_layer(kind, d, r, timing=True), make_layer(kind, d, r, timing=False)
        res["time"][kind] = [time_forward(timed, n, d) for n in ns]
        res["flops"][kind] = [count_flops(counted, n, d) for n in ns]
        say(f"{kind}: " + ", ".join(f"n={n} {t * 1e3:.2f} ms" for n, t in zip(ns, res["time"][kind])))
    for kind in KINDS:
        layer = make_layer(kind, 16, 4, timing=False)
        res["depth"][kind] = [graph_depth(layer, n, 16) for n in depth_ns]
    res["depth_ns"] = depth_ns
    res["path_ns"] = path_ns
    for kind in (*KINDS, "convolutional (dilated)"):
        res["path"][kind] = [path_length(kind, n, r=8) for n in path_ns]
    res["path_r"] = 8
    big = [i for i, n in enumerate(ns) if n >= fit_from] or list(range(len(ns)))
    res["time_exponent"] = {k: fit_exponent([ns[i] for i in big], [v[i] for i in big]) for k, v in res["time"].items()}
    res["flops_exponent"] = {k: fit_exponent([ns[i] for i in big], [v[i] for i in big])
                             for k, v in res["flops"].items()}
    res["crossover_time"] = crossover(ns, res["time"]["self-attention"], res["time"]["recurrent"])
    res["crossover_time_core"] = crossover(ns, res["time"]["self-attention core"], res["time"]["recurrent"])
    res["crossover_flops"] = crossover(ns, res["flops"]["self-attention"], res["flops"]["recurrent"])
    return res


def format_table(res: dict) -> str:
    ns, dn, pn = res["ns"], res["depth_ns"], res["path_ns"]
    big = [n for n in ns if n >= res["fit_from"]] or ns
    lines = [f"Table 1 measured: d = {res['d']}, k = {res['k']}, r = {res['r']}, batch 1, fp32 forward, "
             f"{res['threads']} thread(s), torch {res['torch']}; exponents fitted over n = {big[0]}..{big[-1]}.", "",
             "| layer type | paper: complexity | time exponent | FLOPs exponent | paper: sequential ops | "
             f"graph depth at n = {'/'.join(map(str, dn))} | paper: max path | path at n = {'/'.join(map(str, pn))} |",
             "|---|---|---|---|---|---|---|---|"]
    for kind in (*KINDS, "self-attention core"):
        paper = TABLE1.get(kind, ("(n^2 d part)", "", ""))
        depth = "/".join(map(str, res["depth"][kind])) if kind in res["depth"] else ""
        if kind == "convolutional":
            path = (f"{'/'.join(map(str, res['path'][kind]))} layers contiguous, "
                    f"{'/'.join(map(str, res['path']['convolutional (dilated)']))} dilated")
        elif kind == "recurrent":
            path = f"{'/'.join(map(str, res['path'][kind]))} steps (1 layer)"
        elif kind == "restricted":
            path = f"{'/'.join(map(str, res['path'][kind]))} layers (r = {res['path_r']})"
        elif kind in res["path"]:
            path = f"{'/'.join(map(str, res['path'][kind]))} layers"
        else:
            path = ""
        lines.append(f"| {kind} | {paper[0]} | {res['time_exponent'][kind]:.2f} | {res['flops_exponent'][kind]:.2f} "
                     f"| {paper[1]} | {depth} | {paper[2]} | {path} |")
    lines += ["", "Forward time (ms) per n:", "",
              "| n | " + " | ".join((*KINDS, "self-attention core")) + " |", "|---" * 6 + "|"]
    for i, n in enumerate(ns):
        lines.append(f"| {n} | " + " | ".join(f"{res['time'][k][i] * 1e3:.3f}" for k in (*KINDS, "self-attention core"))
                     + " |")

    def at(x: float | None) -> str:
        return f"n = {x:.0f}" if x else f"none for n <= {ns[-1]}"

    lines += ["", f"Self-attention more expensive than the LSTM: FLOPs from {at(res['crossover_flops'])} "
              f"(closed form: n = 2d = {2 * res['d']}); time from {at(res['crossover_time'])} "
              f"(the core alone: {at(res['crossover_time_core'])}); the paper: n = d = {res['d']}."]
    return "\n".join(lines) + "\n"


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = res["ns"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, what, unit in ((axes[0], "time", "forward time (s)"), (axes[1], "flops", "FLOPs")):
        for kind in (*KINDS, "self-attention core"):
            label = f"restricted (r = {res['r']})" if kind == "restricted" else kind
            ax.loglog(ns, res[what][kind], "--" if kind.endswith("core") else "-", marker="o", ms=3, label=label)
        cross = res["crossover_time" if what == "time" else "crossover_flops"]
        if cross:
            ax.axvline(cross, color="grey", ls=":", lw=1)
            ax.annotate(f"self-attention > LSTM\nfrom n = {cross:.0f}", (cross, ax.get_ylim()[0]),
                        xytext=(4, 20), textcoords="offset points", fontsize=8)
        ax.axvline(res["d"], color="black", ls="-.", lw=0.6)
        ax.annotate(f"n = d = {res['d']}", (res["d"], ax.get_ylim()[1]), xytext=(3, -12),
                    textcoords="offset points", fontsize=8)
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(unit)
        ax.grid(alpha=0.3, which="both")
    axes[0].set_title(f"one layer, d = {res['d']}, batch 1, {res['threads']} thread")
    axes[1].set_title("counted FLOPs (matmuls and convolutions)")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    files.atomic_write(path, lambda p: fig.savefig(p, format="png", dpi=110))
    plt.close(fig)


def measure_table1(quick: bool = False, d: int = 512, r: int = 64, max_n: int = 4096, fit_from: int = 512,
               say: Callable[[str], None] = print) -> dict:
    """Every measurement at n = 16, 32, ..., max_n (256 if quick; smaller graph and path measurements too), timed
    in `res["seconds"]`."""
    top = min(max_n, 256) if quick else max_n
    ns = [2**i for i in range(4, int(math.log2(top)) + 1)]
    depth_ns, path_ns = ([8, 16], [8, 16]) if quick else ([16, 64], [16, 64, 256])
    t0 = time.time()
    res = measure(ns, d, r, depth_ns, path_ns, min(fit_from, ns[-2]), say=say)
    res["seconds"] = time.time() - t0
    return res
